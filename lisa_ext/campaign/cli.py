"""``lisa-ext campaign run SPEC [--resume] [-o DIR]``, ``lisa-ext campaign status DIR`` and
``lisa-ext campaign tool build|install TOOL --src DIR [--target CONF]``."""

from __future__ import annotations

import argparse
from pathlib import Path

from lisa_ext.campaign.runner import CampaignRunner
from lisa_ext.campaign.spec import load_spec
from lisa_ext.campaign.status import campaign_status
from lisa_ext.campaign.tools import build_tool, install_tool
from lisa_ext.compat import quiet_lisa_logs
from lisa_ext.target import check_target_conf, connect
from lisa_ext.vboard.timing import TIMINGS

__all__ = ["register"]


def default_campaign_dir(name: str) -> Path:
    return Path("data") / name


def _run(args: argparse.Namespace) -> int:
    spec = load_spec(args.spec, board_timing=args.board_timing)
    check_target_conf(spec.target)
    out = Path(args.out) if args.out else default_campaign_dir(spec.name)
    quiet_lisa_logs()
    summary = CampaignRunner(spec, out, resume=args.resume, progress=not args.no_progress).run()
    print(f"campaign {spec.name}: {summary.done} runs done, {summary.failed} failed"
          + (f", {summary.skipped} already done" if summary.skipped else "")
          + f" -> {summary.campaign_dir}")
    return 1 if summary.failed else 0


def _status(args: argparse.Namespace) -> int:
    status = campaign_status(args.dir)
    print(status.render())
    return 0 if not (status.failed or status.missing) else 1


def _tool(args: argparse.Namespace) -> int:
    binary = build_tool(args.tool, args.src)
    print(f"built {args.tool}: {binary}")
    if args.tool_action == "install":
        check_target_conf(args.target)
        quiet_lisa_logs()
        target = connect(args.target)
        print(f"installed {args.tool} on {args.target}: {install_tool(target, binary)}")
    return 0


def register(subparsers) -> None:
    p = subparsers.add_parser("campaign", help="run campaigns and inspect their state",
                              description="Run a campaign spec into a campaign directory, list the done, "
                                          "failed and missing runs of one, and build the workload tools "
                                          "Debian does not package.")
    sub = p.add_subparsers(dest="campaign_command", metavar="ACTION")
    sub.required = True
    run = sub.add_parser("run", help="run (or --resume) the campaign described by a YAML spec",
                         description="Run every variant x workload x iteration of a campaign spec on "
                                     "its target, traced, into a campaign directory.")
    run.add_argument("spec", metavar="SPEC", help="campaign spec (YAML)")
    run.add_argument("--resume", action="store_true",
                     help="continue an interrupted campaign: keep finished runs, redo the partial one")
    run.add_argument("-o", "--out", metavar="DIR", help="campaign directory to write (default: data/<name>)")
    run.add_argument("--no-progress", action="store_true", help="no progress bar")
    run.add_argument("--board-timing", choices=TIMINGS, metavar="{faithful,decisions}",
                     help="the virtual board's timing, instead of the spec's board-timing (default faithful: "
                          "exit latencies and OPP speeds paid; decisions: not paid, faster)")
    run.set_defaults(func=_run)
    status = sub.add_parser("status", help="list done / failed / missing runs of a campaign directory",
                            description="List the done, failed and missing runs of a campaign directory; "
                                        "exit status 1 when any run failed or is missing.")
    status.add_argument("dir", metavar="DIR", help="campaign directory, e.g. data/quickstart")
    status.set_defaults(func=_status)
    tool_help = ("build workload binaries Debian does not package (schbench, ebizzy) "
                 "and install them on a target")
    tools = sub.add_parser("tool", help=tool_help, description=tool_help[0].upper() + tool_help[1:] + ".")
    tool_sub = tools.add_subparsers(dest="tool_action", metavar="ACTION")
    tool_sub.required = True
    for action, text in (("build", "build TOOL from --src into the cache and print the binary's path"),
                         ("install", "build TOOL and push it into the executables directory of --target")):
        tool = tool_sub.add_parser(action, help=text, description=text[0].upper() + text[1:] + ".")
        tool.add_argument("tool", choices=["schbench", "ebizzy"], help="which tool")
        tool.add_argument("--src", required=True, metavar="DIR", help="the tool's source tree")
        if action == "install":
            tool.add_argument("--target", required=True, metavar="CONF", help="target config (YAML)")
        tool.set_defaults(func=_tool, tool_action=action)
