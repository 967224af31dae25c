"""``make fuzz``: fuzz the trace readers for a given time under AddressSanitizer and UBSan.

1. Builds the C decoder with clang ``-fsanitize=address,undefined,fuzzer-no-link``
   into ``build/fuzz/`` (its reads then go through a malloc'd copy of the file,
   so ASan sees every byte past the end; see ``_tracedat.c``).
2. Builds the seed traces (seeds.py) if they are missing.
3. Runs the atheris harness (fuzz_traces.py) with libFuzzer under the preloaded
   ASan+libFuzzer runtime that atheris ships, on ``out/fuzz/corpus`` (new
   coverage) and ``tests/fuzz_corpus`` (the committed regression corpus), with
   the per-input limits: ``-timeout=10`` (a hang is a finding), ``-rss_limit_mb``
   and ``-malloc_limit_mb=1024`` (a process past 1 GiB, or one allocation past
   1 GiB, is a finding; inputs are below 1 MiB). A finding stops libFuzzer; the
   run restarts until the time is up.
4. Minimises each finding (``-minimize_crash``), replays it once more and writes
   ``out/fuzz/summary.txt``: cases run, cases/s, load, coverage, findings.

Keep a finding by copying its minimised recipe into tests/fuzz_corpus/ (the
replay test then runs it on every ``make test``). ``--refresh-corpus`` replaces the
corpus by the smallest set of inputs (libFuzzer ``-merge``) that keeps the coverage of
tests/fuzz_corpus and out/fuzz/corpus together; named entries (found-*, known-*, seed-*) stay.

    .venv/bin/python tests/fuzz/run.py --seconds 600 [--out out/fuzz] [--refresh-corpus]

``--target specs`` fuzzes the campaign spec and target config loaders instead (fuzz_loaders.py:
recipes damaging the committed specs and target configs, loader_mutations.py), with the same
limits, in plain Python (no sanitizer build: the loaders are pure Python), on
``out/fuzz-specs/corpus`` and ``tests/fuzz/loader_corpus``; keep a finding by copying its
minimised recipe into tests/fuzz/loader_corpus/ (tests/test_trust_fuzz_loaders.py replays it).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import time
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
SOURCE = REPO / "lisa_ext" / "trace" / "_tracedat.c"
CORPUS = REPO / "tests" / "fuzz_corpus"
RSS_LIMIT_MB = 1024
MALLOC_LIMIT_MB = 1024
TIMEOUT_S = 10
MAX_LEN = 512
SANITIZE = ["-fsanitize=address,undefined,fuzzer-no-link", "-fno-sanitize-recover=all"]


@dataclass(frozen=True)
class Harness:
    """What one ``--target`` runs: the atheris script, its regression corpus, the sanitizer
    build of the decoder (traces only) and the variable naming the script's wrapper."""

    script: str
    corpus: Path
    self_env: str
    so: Path | None = None


def harness(target: str) -> Harness:
    if target == "specs":
        return Harness("fuzz_loaders.py", HERE / "loader_corpus", "FUZZ_LOADERS_SELF")
    return Harness("fuzz_traces.py", CORPUS, "FUZZ_TRACES_SELF", build_sanitized(REPO / "build" / "fuzz"))


def build_sanitized(out_dir: Path) -> Path:
    """The decoder built with ASan, UBSan and libFuzzer's coverage hooks (rebuilt when the source changes)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    so = out_dir / "_tracedat.so"
    if so.exists() and so.stat().st_mtime >= SOURCE.stat().st_mtime:
        return so
    obj = out_dir / "_tracedat.o"
    include = sysconfig.get_paths()["include"]
    # clang links no sanitizer runtime into a shared object: the preloaded runtime provides it
    subprocess.run(["clang", "-c", "-fPIC", "-O1", "-g", "-fno-omit-frame-pointer", *SANITIZE, f"-I{include}",
                    str(SOURCE), "-o", str(obj)], check=True)
    subprocess.run(["clang", "-shared", str(obj), "-lzstd", "-lz", "-lpthread", "-o", str(so)], check=True)
    return so


def runtime() -> Path:
    """atheris' ASan + libFuzzer runtime, preloaded into the interpreter."""
    import atheris

    path = Path(atheris.path()) / "asan_with_fuzzer.so"
    if not path.exists():
        raise SystemExit(f"{path} not found: atheris was installed without its sanitizer runtime")
    return path


def _wrapper(h: Harness) -> Path:
    """An executable that runs the harness: what libFuzzer re-executes to merge or minimise."""
    path = REPO / "build" / "fuzz" / Path(h.script).stem.replace("_", "-")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{HERE / h.script}" "$@"\n')
    path.chmod(0o755)
    return path


def _env(h: Harness) -> dict:
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1", **{h.self_env: str(_wrapper(h))})
    if h.so is None:
        return env
    env.update(
        TRACEDAT_NATIVE=str(h.so),
        LD_PRELOAD=str(runtime()),
        # Python leaks by design; a small quarantine keeps the RSS measure about the input
        ASAN_OPTIONS="detect_leaks=0:quarantine_size_mb=16:malloc_context_size=20:handle_abort=1",
        UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1",
        PYTHONDONTWRITEBYTECODE="1",
    )
    return env


_STAT = re.compile(r"^stat::(\w+):\s*(\d+)", re.M)
_ARTIFACT = re.compile(r"Test unit written to (\S+)")
_COV = re.compile(r"#(\d+)\s+\w+\s+cov: (\d+) ft: (\d+)")


def fuzz(seconds: float, out: Path, h: Harness) -> dict:
    corpus, findings = out / "corpus", out / "findings"
    corpus.mkdir(parents=True, exist_ok=True)
    findings.mkdir(parents=True, exist_ok=True)
    deadline = time.monotonic() + seconds
    totals = {"runs": 0, "seconds": 0.0, "restarts": 0, "findings": [], "peak_rss_mb": 0, "cov": 0, "ft": 0}
    log = (out / "fuzz.log").open("w")
    while (left := deadline - time.monotonic()) > 5:
        cmd = [sys.executable, str(HERE / h.script), str(corpus), str(h.corpus),
               # recipes mean little when short: the loaders' from the first input on
               *(["-len_control=0"] if h.so is None else []),
               f"-max_total_time={int(left)}", f"-timeout={TIMEOUT_S}", f"-rss_limit_mb={RSS_LIMIT_MB}",
               f"-malloc_limit_mb={MALLOC_LIMIT_MB}", f"-max_len={MAX_LEN}", f"-artifact_prefix={findings}/",
               "-print_final_stats=1", "-print_pcs=0", "-reload=0"]
        started = time.monotonic()
        proc = subprocess.run(cmd, cwd=REPO, env=_env(h), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True, errors="replace")
        totals["seconds"] += time.monotonic() - started
        log.write(proc.stdout)
        log.flush()
        stats = {k: int(v) for k, v in _STAT.findall(proc.stdout)}
        totals["runs"] += stats.get("number_of_executed_units", 0)
        totals["peak_rss_mb"] = max(totals["peak_rss_mb"], stats.get("peak_rss_mb", 0))
        for _, cov, ft in _COV.findall(proc.stdout):
            totals["cov"], totals["ft"] = max(totals["cov"], int(cov)), max(totals["ft"], int(ft))
        artifacts = _ARTIFACT.findall(proc.stdout)
        totals["findings"] += artifacts
        if proc.returncode != 0 and not artifacts:
            tail = "\n".join(proc.stdout.splitlines()[-40:])
            raise SystemExit(f"the fuzzer failed without a finding (exit {proc.returncode}):\n{tail}")
        if proc.returncode == 0:
            break
        totals["restarts"] += 1
    log.close()
    return totals


def minimise(artifact: Path, h: Harness, seconds: int = 60) -> Path:
    """The smallest recipe libFuzzer finds that still fails, next to the finding."""
    small = artifact.with_name(artifact.name + ".min")
    subprocess.run([str(_wrapper(h)), "-minimize_crash=1", f"-max_total_time={seconds}",
                    f"-timeout={TIMEOUT_S}", f"-rss_limit_mb={RSS_LIMIT_MB}", f"-malloc_limit_mb={MALLOC_LIMIT_MB}",
                    f"-exact_artifact_path={small}", str(artifact)],
                   cwd=REPO, env=_env(h), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    if not small.exists():
        shutil.copy(artifact, small)
    return small


def describe(artifact: Path, h: Harness) -> str:
    """What the normal build does with a finding: one line."""
    if h.so is None:
        code = ("import json, sys; sys.path.insert(0, sys.argv[1]); import loaders\n"
                "print(json.dumps(next(loaders.replay([sys.argv[2]]))))")
        proc = subprocess.run([sys.executable, "-c", code, str(HERE), str(artifact)], cwd=REPO,
                              capture_output=True, text=True, timeout=120)
        return (proc.stdout.strip() or proc.stderr.strip()[-300:])[:300]
    code = ("import sys; sys.path.insert(0, sys.argv[1]); import mutations, readers\n"
            "name, blob = mutations.mutate(open(sys.argv[2], 'rb').read(), mutations.load_seeds())\n"
            "open(sys.argv[3], 'wb').write(blob)\n"
            "print(name, len(blob), readers.read_any(sys.argv[3]))")
    scratch = artifact.with_suffix(".dat")
    try:
        proc = subprocess.run([sys.executable, "-c", code, str(HERE), str(artifact), str(scratch)], cwd=REPO,
                              capture_output=True, text=True, timeout=120)
    except subprocess.TimeoutExpired:
        return "still hangs (> 120 s)"
    finally:
        scratch.unlink(missing_ok=True)
    if proc.returncode:
        last = (proc.stderr.strip().splitlines() or [f"exit {proc.returncode}"])[-1]
        return f"exit {proc.returncode}: {last[:300]}"
    return "now passes: " + proc.stdout.strip()[:300]


NAMED = re.compile(r"^(found|known|seed)-")


def refresh_corpus(out: Path, h: Harness) -> str:
    """Keep the named entries of the regression corpus (found-*, known-*, seed-*) and replace the
    others by the smallest set of them and of ``out/corpus`` adding coverage (libFuzzer -merge)."""
    merged = out / "merged"
    shutil.rmtree(merged, ignore_errors=True)
    merged.mkdir(parents=True)
    named = [p for p in h.corpus.iterdir() if NAMED.match(p.name)]
    others = [p for p in h.corpus.iterdir() if not NAMED.match(p.name)]
    unnamed = out / "unnamed"
    shutil.rmtree(unnamed, ignore_errors=True)
    unnamed.mkdir()
    for path in named:  # already in the output: merging adds only what they do not cover
        shutil.copy(path, merged / path.name)
    for path in others:
        shutil.copy(path, unnamed / path.name)
    proc = subprocess.run([str(_wrapper(h)), "-merge=1", f"-timeout={TIMEOUT_S}", f"-rss_limit_mb={RSS_LIMIT_MB}",
                           f"-malloc_limit_mb={MALLOC_LIMIT_MB}", str(merged), str(unnamed), str(out / "corpus")],
                          cwd=REPO, env=_env(h), capture_output=True, text=True)
    if proc.returncode:
        raise SystemExit(f"merge failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
    for path in others:
        path.unlink()
    added = [p for p in merged.iterdir() if not NAMED.match(p.name)]
    for path in added:
        shutil.copy(path, h.corpus / path.name)
    return f"corpus refreshed: {len(others)} unnamed entries replaced by {len(added)} ({len(named)} named kept)"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=600)
    ap.add_argument("--out", type=Path, default=REPO / "out" / "fuzz")
    ap.add_argument("--refresh-corpus", action="store_true",
                    help="after fuzzing, rewrite the regression corpus as the merge of it and the new inputs")
    ap.add_argument("--target", choices=("traces", "specs"), default="traces",
                    help="the trace readers (default) or the campaign spec and target config loaders")
    args = ap.parse_args(argv)
    sys.path.insert(0, str(HERE))
    if args.target == "specs":
        import loader_mutations

        seeds_text = f"{len(loader_mutations.load_seeds())} seeds, loaders in plain Python"
        if args.out == ap.get_default("out"):
            args.out = REPO / "out" / "fuzz-specs"
    else:
        import seeds

        seeds_text = f"{len(seeds.seed_paths())} seeds, ASan+UBSan decoder"
    h = harness(args.target)
    load_before = os.getloadavg()[0]
    totals = fuzz(args.seconds, args.out, h)
    rate = totals["runs"] / totals["seconds"] if totals["seconds"] else 0.0
    lines = [
        f"fuzzed {totals['seconds']:.0f} s: {totals['runs']:,} cases, {rate:.1f} cases/s "
        f"({seeds_text}, {os.cpu_count()} CPUs, load {load_before:.1f} before, "
        f"{os.getloadavg()[0]:.1f} after)",
        f"coverage: {totals['cov']} edges, {totals['ft']} features; corpus {args.out / 'corpus'} "
        f"({len(list((args.out / 'corpus').iterdir()))} inputs); peak RSS {totals['peak_rss_mb']} MiB; "
        f"restarts after findings: {totals['restarts']}",
    ]
    for found in totals["findings"]:
        small = minimise(Path(found), h)
        lines.append(f"finding {Path(found).name}: minimised {small} ({small.stat().st_size} bytes): "
                     f"{describe(small, h)}")
    if not totals["findings"]:
        lines.append("findings: none (no crash, sanitizer report, hang > 10 s or RSS > 1 GiB)")
    if args.refresh_corpus:
        lines.append(refresh_corpus(args.out, h))
    (args.out / "summary.txt").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 1 if totals["findings"] else 0


if __name__ == "__main__":
    sys.exit(main())
