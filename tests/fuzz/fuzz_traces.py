"""libFuzzer harness (atheris) for the trace readers: trace.dat, ftrace text, systrace.

Each input is a recipe (mutations.py) that damages one of the seed traces
(seeds.py: small real traces, trace.dat v6, v7 zstd/zlib/none, text, systrace);
the readers then run on the damaged file as the CLI runs them (readers.py).
Tables or one UserError line naming the file are fine; any other exception, a
crash, a sanitizer report, a hang (-timeout) or a memory blow-up
(-rss_limit_mb, -malloc_limit_mb) is a finding, written with -artifact_prefix.

Coverage comes from lisa_ext's Python code (atheris instruments it) and, with
the sanitizer build of the C decoder named by TRACEDAT_NATIVE, from the C code
(clang -fsanitize=address,undefined,fuzzer-no-link). ``make fuzz`` builds that
and runs this harness under it for FUZZ_SECONDS (tests/fuzz/run.py); by hand:

    .venv/bin/python tests/fuzz/fuzz_traces.py CORPUS_DIR tests/fuzz_corpus -max_total_time=60
"""

import os
import sys
import tempfile

import atheris

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def _load_native_override() -> None:
    """Use the instrumented decoder named by TRACEDAT_NATIVE, if any."""
    path = os.environ.get("TRACEDAT_NATIVE")
    if not path:
        return
    import importlib.machinery
    import importlib.util

    import lisa_ext.trace

    name = "lisa_ext.trace._tracedat"
    loader = importlib.machinery.ExtensionFileLoader(name, path)
    spec = importlib.util.spec_from_file_location(name, path, loader=loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    sys.modules[name] = module
    lisa_ext.trace._tracedat = module


import mutations  # noqa: E402  (not instrumented: coverage of the mutator itself is noise)

with atheris.instrument_imports(include=["lisa_ext"]):
    import lisa_ext.trace  # noqa: F401

    _load_native_override()
    # the readers import these on first use: import them here, where they get instrumented
    import lisa_ext.trace.cache  # noqa: F401
    import lisa_ext.trace.systrace  # noqa: F401
    import lisa_ext.trace.text  # noqa: F401
    import readers

SEEDS = mutations.load_seeds()
# tmpfs when there is one: one write per input
SCRATCH = tempfile.NamedTemporaryFile(prefix="fuzz-trace-", dir="/dev/shm" if os.path.isdir("/dev/shm") else None,
                                      delete=False).name


def test_one_input(data: bytes) -> None:
    _, blob = mutations.mutate(data, SEEDS)
    with open(SCRATCH, "wb") as f:
        f.write(blob)
    readers.read_any(SCRATCH)


def main() -> None:
    # libFuzzer's -merge and -minimize_crash re-run argv[0] through the shell: run.py points
    # FUZZ_TRACES_SELF at an executable wrapper of this script
    argv = [os.environ.get("FUZZ_TRACES_SELF") or sys.argv[0], *sys.argv[1:]]
    atheris.Setup(argv, test_one_input)
    try:
        atheris.Fuzz()
    finally:
        os.unlink(SCRATCH)


if __name__ == "__main__":
    main()
