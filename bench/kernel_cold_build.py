"""Cold kernel build: what the compiler cache costs while it is empty.

A fresh clone's first board kernel is built with an empty ccache. ccache's default mode runs
the preprocessor once more per object to look it up; depend mode (what
``lisa_ext.workbench.ccache_env`` sets) takes the object's inputs from the dependency file the
compiler writes anyway. This builds the baseline variant's sources and ``.config`` from scratch
once per mode, each in a build directory and ccache of its own, and prints wall and CPU seconds,
and their ratio to the build without ccache. Then, in depend mode, a rebuild of everything from
that now-full ccache, which must still find every object.

    .venv/bin/python bench/kernel_cold_build.py [--modes none,ccache,depend] [--jobs J] [--smoke]

Needs the baseline built once in this cache (``lisa-ext kernel build
kernels/iowait-boost/baseline.yml``): its artefacts name the commit and ``.config`` built here.
About 5 min per mode on two idle cores; it writes only to a temporary directory.
``--smoke`` (what ``make test`` runs) builds nothing: it finds the baseline's commit and
``.config`` and says what a full run would build.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BASELINE = REPO / "kernels" / "iowait-boost" / "baseline.yml"
#: mode -> (CC, environment added); "ccache" is ccache's default (preprocessor) mode
MODES = {"none": ("gcc", {}),
         "ccache": ("ccache gcc", {"CCACHE_NODEPEND": "1"}),
         "depend": ("ccache gcc", {"CCACHE_DEPEND": "1"})}


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _timed_make(src: Path, build: Path, cc: str, env: dict[str, str], jobs: int, log: Path) -> tuple[float, float]:
    cpu0, t0 = _children_cpu(), time.monotonic()
    with log.open("a") as out:
        subprocess.run(["make", "-C", str(src), f"O={build}", "ARCH=x86_64", f"-j{jobs}", f"CC={cc}",
                        "bzImage", "modules"], env=env, stdout=out, stderr=subprocess.STDOUT, check=True)
    return time.monotonic() - t0, _children_cpu() - cpu0


def _ccache_hits(env: dict[str, str]) -> str:
    text = subprocess.run(["ccache", "-s"], env=env, capture_output=True, text=True).stdout
    m = re.search(r"Hits:\s+(\d+\s*/\s*\d+)", text)
    return m.group(1).replace(" ", "") if m else "?"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--modes", default="none,ccache,depend", help="comma-separated, of: " + ", ".join(MODES))
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 2)
    ap.add_argument("--smoke", action="store_true", help="find what would be built; build nothing")
    args = ap.parse_args()
    modes = args.modes.split(",")
    unknown = [m for m in modes if m not in MODES]
    if unknown:
        print(f"--modes: unknown {', '.join(unknown)} (expected: {', '.join(MODES)})", file=sys.stderr)
        return 2

    from lisa_ext.kernel.build import artefact_hash, kernels_cache
    from lisa_ext.kernel.spec import load_variant_spec
    from lisa_ext.kernel.tree import KernelTree, tree_key

    spec = load_variant_spec(BASELINE)
    key = tree_key(spec.base)
    tree = KernelTree(key, kernels_cache() / "trees" / key)
    artefacts = kernels_cache() / "artefacts" / artefact_hash(spec, tree.key)
    if not (artefacts / "artefacts.json").exists():
        if args.smoke:
            print(f"skipped: the baseline ({BASELINE.relative_to(REPO)}) is not built in this cache "
                  "and --smoke builds nothing")
            return 0
        print(f"{BASELINE.relative_to(REPO)} is not built in this cache: "
              f"lisa-ext kernel build {BASELINE.relative_to(REPO)}", file=sys.stderr)
        return 2
    commit = json.loads((artefacts / "artefacts.json").read_text())["commit"]
    if args.smoke:
        print(f"would build baseline {commit[:12]} ({artefacts / 'config'}) from scratch, "
              f"-j{args.jobs}, once per mode: {', '.join(modes)}")
        return 0

    with tempfile.TemporaryDirectory(prefix="lisa-ext-bench-cold-") as tmp:
        work = Path(tmp)
        src = work / "src"
        src.mkdir()
        # the baseline's sources, exported: the cache's tree stays as the last build left it
        archive = subprocess.Popen(["git", "-C", str(tree.src), "archive", commit], stdout=subprocess.PIPE)
        subprocess.run(["tar", "-x", "-C", str(src)], stdin=archive.stdout, check=True)
        if archive.wait():
            print(f"git archive {commit} failed in {tree.src}", file=sys.stderr)
            return 1
        log = work / "build.log"
        print(f"baseline {commit[:12]}, -j{args.jobs}, load at start {os.getloadavg()[0]:.2f}")
        results: dict[str, tuple[float, float]] = {}
        for mode in modes:
            cc, extra = MODES[mode]
            build = work / f"build-{mode}"
            build.mkdir()
            shutil.copy2(artefacts / "config", build / ".config")
            env = {k: v for k, v in os.environ.items() if not k.startswith("CCACHE_")}
            env.update(extra, CCACHE_DIR=str(work / f"ccache-{mode}"), CCACHE_MAXSIZE="5G")
            results[mode] = _timed_make(src, build, cc, env, args.jobs, log)
            wall, cpu = results[mode]
            print(f"{mode:>7}: {wall:6.1f} s wall, {cpu:6.1f} s CPU (load {os.getloadavg()[0]:.2f})", flush=True)
            if mode == "depend":
                subprocess.run(["make", "-C", str(src), f"O={build}", "-s", "clean"], check=True,
                               stdout=subprocess.DEVNULL)
                subprocess.run(["ccache", "-z"], env=env, check=True, stdout=subprocess.DEVNULL)
                wall, cpu = _timed_make(src, build, cc, env, args.jobs, log)
                print(f"         rebuilt from that ccache: {wall:6.1f} s wall, {cpu:6.1f} s CPU, "
                      f"hits {_ccache_hits(env)}", flush=True)
        if "none" in results:
            base_wall, base_cpu = results["none"]
            for mode, (wall, cpu) in results.items():
                if mode != "none":
                    print(f"{mode} / none: {wall / base_wall:.2f}x wall, {cpu / base_cpu:.2f}x CPU")
    return 0


if __name__ == "__main__":
    sys.exit(main())
