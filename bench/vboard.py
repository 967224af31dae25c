"""Virtual-board timings: boot to SSH, kexec switch, and the rootfs cache.

Prints, as medians of REPEAT rounds measured in this one run:

* the rootfs lookup when cached (``ensure_rootfs``);
* a direct boot of the baseline variant until SSH answers (``deploy_variant``,
  method ``boot``, kernel already built);
* a kexec switch to the patched variant and back (method ``kexec``).

With ``--arch arm64``, the arm64 board (``--cpus-per-cluster``, default the SoC's: RK3399 4,2):
the eas study's baseline booted, and a kexec to teo-util's teo (same build, another command
line) and back.

The first build of the variants and of the rootfs is not timed here (see
bench/kernel_rebuild.py for builds). Needs root; leaves the board down.

    .venv/bin/python bench/vboard.py [--repeat N] [--smoke] [--arch arm64 [--cpus-per-cluster 2,2]]

``--smoke`` (what ``make test`` runs so that the benchmark cannot rot) boots and builds
nothing: it times the cached rootfs lookup when this cache already holds a rootfs, and
otherwise says so and stops.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
#: per architecture: the variant booted, the one kexec'd into and back
VARIANTS = {
    "x86_64": (REPO / "kernels" / "iowait-boost" / "baseline.yml", REPO / "kernels" / "iowait-boost" / "no-iowait-boost.yml"),
    "arm64": (REPO / "kernels" / "eas" / "baseline.yml", REPO / "kernels" / "teo-util" / "teo.yml"),
}


def _timed(fn) -> float:
    t0 = time.monotonic()
    fn()
    return time.monotonic() - t0


def smoke() -> int:
    """The rootfs lookup, only when this cache already holds a built rootfs."""
    from lisa_ext.vboard import rootfs

    cache = rootfs.vboard_cache_dir()
    if not (any(cache.glob("debootstrap-*")) and any(cache.glob("rootfs-*.ext4"))):
        print(f"skipped: no rootfs built in {cache} yet, and --smoke builds and boots nothing")
        return 0
    print(f"rootfs lookup (cached): {_timed(rootfs.ensure_rootfs) * 1e3:.1f} ms")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--arch", choices=sorted(VARIANTS), default="x86_64")
    parser.add_argument("--cpus-per-cluster", metavar="N,M", help="arm64: CPUs per cluster, little first")
    parser.add_argument("--smoke", action="store_true",
                        help="time the cached rootfs lookup only; boot and build nothing")
    args = parser.parse_args()
    if args.smoke:
        return smoke()

    from lisa_ext.kernel.build import build_variant
    from lisa_ext.kernel.deploy import deploy_variant
    from lisa_ext.target.board import BoardTarget
    from lisa_ext.vboard import rootfs
    from lisa_ext.vboard.board import BoardSettings, VirtualBoard

    BASELINE, PATCHED = VARIANTS[args.arch]
    shape = tuple(int(n) for n in args.cpus_per_cluster.split(",")) if args.cpus_per_cluster else None
    lookup = lambda: rootfs.ensure_rootfs(arch=args.arch)  # noqa: E731
    lookup()
    build_variant(BASELINE, arch=args.arch)
    build_variant(PATCHED, arch=args.arch)
    board = VirtualBoard(BoardSettings(arch=args.arch, cpus_per_cluster=shape))
    target = BoardTarget(board)
    board.down()
    lookups, boots, kexecs = [], [], []
    try:
        for _ in range(args.repeat):
            lookups.append(_timed(lookup))
            board.down()
            boots.append(_timed(lambda: deploy_variant(target, BASELINE, method="boot")))
            kexecs.append(_timed(lambda: deploy_variant(target, PATCHED, method="kexec")))
            kexecs.append(_timed(lambda: deploy_variant(target, BASELINE, method="kexec")))
    finally:
        board.down()
    print(f"rootfs lookup (cached): median {statistics.median(lookups) * 1e3:.1f} ms")
    print(f"direct boot to SSH, verified: median {statistics.median(boots):.1f} s "
          f"(min {min(boots):.1f}, max {max(boots):.1f}, n={len(boots)})")
    print(f"kexec switch to SSH, verified: median {statistics.median(kexecs):.1f} s "
          f"(min {min(kexecs):.1f}, max {max(kexecs):.1f}, n={len(kexecs)})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
