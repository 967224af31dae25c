"""libFuzzer-style harness (atheris) for the trace.dat decoder.

Each input damages a real trace.dat (see tracedat_mutations.py) and the whole
reader runs on it: a clean result, or a UserError naming the file and offset,
are both fine; any other exception, a crash or a hang is a bug. Crashers go
to tests/fuzz_corpus/ (``-artifact_prefix``) and are replayed by
tests/test_trace_dat_fuzz.py.

    .venv/bin/python tests/fuzz/fuzz_tracedat.py tests/fuzz_corpus -max_total_time=300 \\
        -artifact_prefix=tests/fuzz_corpus/crash- -timeout=20

To give libFuzzer coverage of the C decoder and catch memory errors with
AddressSanitizer, build an instrumented copy and point TRACEDAT_NATIVE at it:

    clang -shared -fPIC -O1 -g -fsanitize=address,fuzzer-no-link \\
        -I$(python3.11 -c 'import sysconfig; print(sysconfig.get_paths()["include"])') \\
        lisa_ext/trace/_tracedat.c -lzstd -lz -lpthread -o /tmp/_tracedat_asan.so
    TRACEDAT_NATIVE=/tmp/_tracedat_asan.so ASAN_OPTIONS=detect_leaks=0 \\
        LD_PRELOAD=$(.venv/bin/python -c 'import atheris; print(atheris.path())')/asan_with_fuzzer.so \\
        .venv/bin/python tests/fuzz/fuzz_tracedat.py ...

To merge corpora (-merge=1), libFuzzer re-executes argv[0] through the shell:
call the harness through a small executable wrapper that execs the venv's
python on this file.
"""

import os
import sys
import tempfile

import atheris

sys.path.insert(0, os.path.dirname(__file__))


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


_load_native_override()

with atheris.instrument_imports():
    import tracedat_mutations
    from lisa_ext.errors import UserError
    from lisa_ext.trace import tracedat

BASES = tracedat_mutations.bases()
SCRATCH = tempfile.NamedTemporaryFile(prefix="fuzz-tracedat-", suffix=".dat", delete=False)


def test_one_input(data: bytes) -> None:
    _, blob = tracedat_mutations.mutate(data, BASES)
    with open(SCRATCH.name, "wb") as f:
        f.write(blob)
    try:
        tracedat.read_tracedat(SCRATCH.name)
    except UserError:
        pass


def main() -> None:
    atheris.Setup(sys.argv, test_one_input)
    try:
        atheris.Fuzz()
    finally:
        os.unlink(SCRATCH.name)


if __name__ == "__main__":
    main()
