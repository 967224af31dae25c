"""``lisa-ext vboard up|down|ssh|status``: the QEMU virtual board from the shell."""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from pathlib import Path

from lisa_ext.devicetree import SOCS
from lisa_ext.errors import UserError
from lisa_ext.kernel.deploy import deploy_variant, first_boot_missing
from lisa_ext.target.board import BoardTarget, board_first_boot
from lisa_ext.vboard.board import DEFAULT_VARIANTS, BoardSettings, VirtualBoard
from lisa_ext.vboard.qemu import CLOCKS, CLOCKS_HELP
from lisa_ext.workbench import workbench_path

__all__ = ["register"]


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("vboard", help="manage the QEMU virtual board",
                              description="Boot, reach and stop the QEMU TCG virtual board.")
    sub = p.add_subparsers(dest="vboard_command", metavar="ACTION")
    sub.required = True

    up = sub.add_parser("up", help="boot the board with a kernel variant or a kernel image",
                        description="Boot the virtual board with a kernel variant (built if needed) "
                                    "or a kernel image, and wait until it answers over SSH. Without "
                                    "either, the board's baseline variant ("
                                    + ", ".join(f"{a}: {'/'.join(p[1:])}" for a, p in DEFAULT_VARIANTS.items())
                                    + ").")
    source = up.add_mutually_exclusive_group()
    source.add_argument("--variant", type=Path, metavar="VARIANT",
                        help="kernel variant spec: built for the board's architecture if needed, then "
                             "booted and verified")
    source.add_argument("--kernel", type=Path, metavar="IMAGE",
                        help="boot this kernel image (bzImage, or arm64 Image) as is")
    up.add_argument("--modules", type=Path, metavar="DIR",
                    help="with --kernel: staged modules tree (containing lib/modules/<release>)")
    up.add_argument("--load", action="append", default=[], metavar="MODULE",
                    help="with --kernel: module to load at boot (repeatable)")
    up.add_argument("--cmdline", default="", metavar="ARGS", help="with --kernel: appended to the board's kernel command line")
    up.add_argument("--method", choices=("boot", "kexec"), default="boot",
                    help="with --variant: restart QEMU (boot, default) or kexec into it on a running board")
    shape = BoardSettings()
    up.add_argument("--arch", choices=("x86_64", "arm64"), default=shape.arch,
                    help="x86_64: q35 machine, two sockets; arm64: virt machine with a real SoC's clusters, "
                         "idle states, OPPs and Energy Model (energy-aware scheduling); default x86_64")
    up.add_argument("--soc", choices=sorted(SOCS), default=shape.soc,
                    help=f"arm64: the SoC whose clusters the board has (default {shape.soc})")
    up.add_argument("--cpus-per-cluster", metavar="N,M", type=_cpu_counts,
                    help="arm64: CPUs in each cluster, little first (default: the SoC's, e.g. 4,2)")
    up.add_argument("--soc-dtb", type=Path, metavar="DTB",
                    help="arm64 with --kernel: the SoC's compiled device tree (a variant build's dtbs/<soc>.dtb)")
    up.add_argument("--sockets", type=int, default=shape.sockets, metavar="N",
                    help=f"sockets, each its own LLC (default {shape.sockets})")
    up.add_argument("--cores-per-socket", type=int, default=shape.cores_per_socket, metavar="N",
                    help=f"cores per socket (default {shape.cores_per_socket})")
    up.add_argument("--memory-mb", type=int, default=shape.memory_mb, metavar="MB",
                    help=f"guest memory (default {shape.memory_mb})")
    up.add_argument("--accel", default=shape.accel, metavar="ACCEL",
                    help=f"QEMU accelerator (default {shape.accel}; the studies assume TCG)")
    up.add_argument("--clock", choices=CLOCKS, default=shape.clock,
                    help=f"the guest's clock ({CLOCKS_HELP}); switching clock restarts QEMU (a --method kexec keeps the running board's)")
    up.set_defaults(func=_up)

    down = sub.add_parser("down", help="power the board off",
                          description="Power the virtual board off and stop QEMU.")
    down.set_defaults(func=_down)

    ssh = sub.add_parser("ssh", help="open a shell on the board, or run CMD there",
                         description="Open a shell on the running virtual board, or run CMD there.")
    ssh.add_argument("cmd", nargs=argparse.REMAINDER, metavar="CMD", help="command and its arguments")
    ssh.set_defaults(func=_ssh)

    status = sub.add_parser("status", help="is the board up, with which kernel and clock",
                            description="Say whether the virtual board is up, which kernel it runs and "
                                        "on which clock.")
    status.add_argument("--json", action="store_true", help="print the state as JSON")
    status.set_defaults(func=_status)


def _cpu_counts(text: str) -> tuple[int, ...]:
    try:
        counts = tuple(int(n) for n in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected CPU counts per cluster such as 4,2") from None
    return counts


def _board(args: argparse.Namespace | None = None):
    if args is None:
        return VirtualBoard()
    return VirtualBoard(BoardSettings(arch=args.arch, soc=args.soc, cpus_per_cluster=args.cpus_per_cluster,
                                      sockets=args.sockets, cores_per_socket=args.cores_per_socket,
                                      memory_mb=args.memory_mb, accel=args.accel, clock=args.clock))


def _log_to_stderr() -> None:
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)


def _release_of(modules: Path) -> str:
    base = modules / "lib" / "modules"
    releases = [d.name for d in base.iterdir() if d.is_dir()] if base.is_dir() else []
    if len(releases) != 1:
        raise UserError(f"{modules}: expected exactly one lib/modules/<release> directory, found {releases}")
    return releases[0]


def _first_build_note(board: VirtualBoard, variant: Path) -> str | None:
    """One line before a build starts: what this cache lacks for ``variant`` and what building it costs."""
    needs = board_first_boot(board)
    try:
        missing = first_boot_missing(needs, variant)
    except UserError:
        return None  # the deploy says what is wrong with the spec
    if not missing:
        return None
    return (f"the {board.arch} board: {' and '.join(missing)} not built in this cache yet, built now, once "
            f"(both from an empty cache: {needs.cost}); later boots take seconds")


def _up(args: argparse.Namespace) -> int:
    _log_to_stderr()
    # a kexec switches the running board, whatever it was booted as
    board = VirtualBoard() if args.method == "kexec" else _board(args)
    if args.kernel is None:
        variant = args.variant or workbench_path(*DEFAULT_VARIANTS[board.arch])
        note = _first_build_note(board, Path(variant))
        if note:
            print(note, flush=True)
        provenance = deploy_variant(BoardTarget(board), variant, method=args.method)
        print(json.dumps(provenance, indent=2, default=str))
        return 0
    if args.method != "boot":
        raise UserError("--method kexec needs --variant (the running board must verify what it switches to)")
    release = _release_of(args.modules) if args.modules else None
    running = board.up(args.kernel, modules_dir=args.modules, release=release, load=args.load,
                       cmdline=args.cmdline, label=args.kernel.name, soc_dtb=args.soc_dtb)
    print(f"board up: {running.release} {running.version}; SSH port {board.port}")
    return 0


def _down(args: argparse.Namespace) -> int:
    _log_to_stderr()
    print("board stopped" if _board().down() else "board was not running")
    return 0


def _ssh(args: argparse.Namespace) -> int:
    board = _board()
    cmd = args.cmd
    if cmd and cmd[0] == "--":
        cmd = cmd[1:]
    argv = board.ssh_base(tty=not cmd and sys.stdin.isatty()) + ([" ".join(cmd)] if cmd else [])
    sys.stdout.flush()
    os.execvp(argv[0], argv)
    return 127  # not reached


def _status(args: argparse.Namespace) -> int:
    info = _board().status()
    if args.json:
        print(json.dumps(info, indent=2))
    elif info is None:
        print("down")
    else:
        print(f"up: pid {info['pid']}, SSH 127.0.0.1:{info['ssh_port']}, kernel {info['kernel']}"
              f" ({info['label'] or 'unlabelled'}, {info['deployed_by']}), {info['clock']} clock")
    return 0 if info is not None else 3
