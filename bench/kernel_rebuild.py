"""Kernel build cache speed: cache hit, and incremental rebuild after a one-file patch.

Builds the baseline variant (from scratch only the first time on a machine),
then REPEAT times a variant that adds a one-file patch to it (a new function
in drivers/cpuidle/governors/menu.c, different each time so neither the
artefact cache nor ccache can answer) and then the baseline again (a cache
hit). Prints the median wall time of each and the number of objects
compiled, parsed from the build log. Goal: incremental rebuild < 60 s.

    .venv/bin/python bench/kernel_rebuild.py [--repeat N] [--jobs J] [--smoke]

``--smoke`` (what ``make test`` runs so that the benchmark cannot rot) builds nothing:
it times the baseline's cache hit when the baseline is already built in this cache,
and otherwise says so and stops.
"""

from __future__ import annotations

import argparse
import re
import shutil
import statistics
import subprocess
import tempfile
import time
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BASELINE = REPO / "kernels" / "iowait-boost" / "baseline.yml"
MENU = "drivers/cpuidle/governors/menu.c"
BOARD_PATCH = REPO / "kernels" / "patches" / "board" / "0001-x86-aperfmperf-frequency-invariance-from-cpufreq.patch"


def probe_spec(workdir: Path, src: Path) -> Path:
    original = subprocess.run(["git", "show", f"lisa-ext-base:{MENU}"], cwd=src, capture_output=True,
                              text=True, check=True).stdout.splitlines()
    symbol = f"lisa_ext_bench_{uuid.uuid4().hex[:12]}"
    n = len(original)
    patch = workdir / f"{symbol}.diff"
    patch.write_text(f"--- a/{MENU}\n+++ b/{MENU}\n@@ -{n},1 +{n},3 @@\n {original[-1]}\n"
                     f"+int {symbol}(void);\n+int {symbol}(void) {{ return 1; }}\n")
    spec = workdir / f"{symbol}.yml"
    # the baseline's series (its board-support patch) plus the probe: one file differs
    spec.write_text(f"name: bench\npatches: [{BOARD_PATCH}, {patch}]\n"
                    f"configs: [{REPO}/kernels/configs/vboard.config]\n")
    return spec


def smoke() -> int:
    """The baseline's cache hit, only when its tree and artefacts are already here."""
    from lisa_ext.kernel.build import artefact_hash, build_variant, kernels_cache
    from lisa_ext.kernel.spec import load_variant_spec
    from lisa_ext.kernel.tree import KernelTree, tree_key

    spec = load_variant_spec(BASELINE)
    key = tree_key(spec.base)
    tree = KernelTree(key, kernels_cache() / "trees" / key)
    if not tree.src.is_dir() or not (kernels_cache() / "artefacts" / artefact_hash(spec, tree.key)
                                     / "artefacts.json").exists():
        print(f"skipped: the baseline ({BASELINE.relative_to(REPO)}) is not built in this cache "
              "and --smoke builds nothing")
        return 0
    t = time.monotonic()
    art = build_variant(BASELINE, log=lambda *a: None)
    print(f"cache hit: {(time.monotonic() - t) * 1000:.0f} ms (cached={art.cached})")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--jobs", type=int, default=None)
    parser.add_argument("--smoke", action="store_true",
                        help="time a cache hit of an already built baseline; build nothing")
    args = parser.parse_args()

    from lisa_ext.kernel.build import build_variant

    if args.smoke:
        return smoke()

    quiet = lambda *a: None  # noqa: E731
    t0 = time.monotonic()
    base = build_variant(BASELINE, jobs=args.jobs, log=quiet)
    print(f"baseline: {'cache hit' if base.cached else 'built'} in {time.monotonic() - t0:.1f} s")
    src = next(base.directory.parents[1].glob("trees/*/src"))

    rebuild, restore, hits, compiled = [], [], [], []
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(args.repeat):
            spec = probe_spec(Path(tmp), src)
            t = time.monotonic()
            art = build_variant(spec, jobs=args.jobs, log=quiet)
            rebuild.append(time.monotonic() - t)
            compiled.append(len(re.findall(r"^\s+CC\s+\S+\.o$", art.build_log.read_text(), re.M)))
            shutil.rmtree(art.directory)
            t = time.monotonic()
            build_variant(BASELINE, jobs=args.jobs, log=quiet)
            hits.append(time.monotonic() - t)
    # the tree now holds the last probe; leave it at the baseline for whoever builds next
    t = time.monotonic()
    build_variant(BASELINE, jobs=args.jobs, force=True, log=quiet)
    restore.append(time.monotonic() - t)
    print(f"incremental rebuild after a one-file patch: median {statistics.median(rebuild):.1f} s "
          f"over {len(rebuild)} runs ({', '.join(f'{x:.1f}' for x in rebuild)}); "
          f"objects compiled: {compiled}")
    print(f"cache hit: median {statistics.median(hits) * 1000:.0f} ms")
    print(f"rebuild back to baseline (forced): {restore[0]:.1f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
