"""libFuzzer harness (atheris) for the campaign spec and target config loaders.

Each input is a recipe (loader_mutations.py) that damages one of the committed
specs (notebooks/*.yml, campaigns/*.yml) or target configs (target-configs/*.yml);
the loaders then run on the damaged file as the CLI runs them (loaders.py). A
loaded spec or config, or one UserError line naming a file, are fine; any other
exception, a hang (-timeout) or a memory blow-up (-rss_limit_mb,
-malloc_limit_mb) is a finding, written with -artifact_prefix. Coverage comes
from lisa_ext's and ruamel.yaml's Python code, which atheris instruments.
``tests/fuzz/run.py --target specs`` runs it for a given time; by hand:

    .venv/bin/python tests/fuzz/fuzz_loaders.py CORPUS_DIR tests/fuzz_corpus_loaders -max_total_time=60
"""

import os
import sys

import atheris

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

# the mutator imports ruamel too: import ruamel here first, where it gets instrumented (the
# mutator itself is not: its coverage is noise)
with atheris.instrument_imports(include=["lisa_ext", "ruamel"]):
    import ruamel.yaml  # noqa: F401

    import loaders

import loader_mutations  # noqa: E402

SEEDS = loader_mutations.load_seeds()
SCRATCH = loaders.Scratch()


def test_one_input(data: bytes) -> None:
    case = loader_mutations.mutate(data, SEEDS)
    loaders.load_any(case, SCRATCH.write(case))


def main() -> None:
    loaders.preload()
    # libFuzzer's -merge and -minimize_crash re-run argv[0] through the shell: run.py points
    # FUZZ_LOADERS_SELF at an executable wrapper of this script
    argv = [os.environ.get("FUZZ_LOADERS_SELF") or sys.argv[0], *sys.argv[1:]]
    atheris.Setup(argv, test_one_input)
    try:
        atheris.Fuzz()
    finally:
        SCRATCH.remove()


if __name__ == "__main__":
    main()
