"""``lisa-ext campaign run SPEC [--resume] [-o DIR]``, ``lisa-ext campaign check SPEC``,
``lisa-ext campaign status DIR [--repair]`` and ``lisa-ext campaign tool build|install TOOL --src DIR
[--target CONF]``."""

from __future__ import annotations

import argparse
import shlex
from pathlib import Path

from lisa_ext.campaign.runner import CampaignInterrupted, run_campaign
from lisa_ext.campaign.spec import load_spec
from lisa_ext.campaign.status import campaign_status
from lisa_ext.campaign.tools import BUILDABLE, build_tool, cached_build, install_tool
from lisa_ext.campaign.workloads import WORKLOAD_KINDS
from lisa_ext.compat import quiet_lisa_logs
from lisa_ext.errors import UserError
from lisa_ext.target import CLOCKS, CLOCKS_HELP, TargetConfig, connect
from lisa_ext.target.timing import TIMINGS, TIMINGS_HELP
from lisa_ext.workbench import campaign_dir, shown_path

__all__ = ["register"]


def _campaign_dir_problem(path: Path) -> str | None:
    """Why ``path`` cannot be a campaign directory (a file stands where it or a parent would be),
    or None."""
    existing = next((p for p in (path, *path.parents) if p.exists() or p.is_symlink()), None)
    if existing is not None and not existing.is_dir():
        where = "is a file" if existing == path else f"is under the file {existing}"
        return f"{where}; expected a campaign directory (a new path, or one a campaign run wrote)"
    return None


def _run(args: argparse.Namespace) -> int:
    spec = load_spec(args.spec, board_timing=args.board_timing, board_clock=args.board_clock)
    out = Path(args.out) if args.out else campaign_dir(spec.name)
    problem = _campaign_dir_problem(out)
    if problem is not None:
        raise UserError(f"--out {out}: {problem}")
    try:
        summary = run_campaign(spec, out, resume=args.resume, progress=not args.no_progress)
    except KeyboardInterrupt as exc:
        again = ["lisa-ext", "campaign", "run", args.spec, "--out", str(out), "--resume"]
        if args.board_timing:
            again += ["--board-timing", args.board_timing]
        raise CampaignInterrupted(f"{exc or 'interrupted'}; resume with {shlex.join(again)}") from None
    print(summary.line())
    return 1 if summary.failed else 0


def _check(args: argparse.Namespace) -> int:
    for path in args.specs:
        _check_one(path, args.target)
    return 0


def _check_one(path: str, target: str | None) -> None:
    """Validate a spec (and its smoke size), its target config and its kernel variants, offline."""
    # deferred: the kernel layer is only needed for specs with kernel variants
    from lisa_ext.kernel.spec import load_variant_spec

    spec = load_spec(path, target=target)
    smoke = load_spec(path, smoke=True, target=target) if "smoke" in spec.raw else None
    kind = TargetConfig.load(spec.target).kind
    kernels = {v.kernel: load_variant_spec(v.kernel).name for v in spec.variants if v.kernel is not None}
    runs = len(spec.variants) * len(spec.workloads) * spec.iterations
    print(f"{path}: ok: campaign {spec.name!r} on {shown_path(spec.target)} ({kind}): {len(spec.variants)} "
          f"variant(s), {len(spec.workloads)} workload(s) x {spec.iterations} iteration(s) = {runs} runs")
    if smoke is not None:
        print(f"  --smoke: {len(smoke.workloads)} workload(s) x {smoke.iterations} iteration(s) = "
              f"{len(smoke.variants) * len(smoke.workloads) * smoke.iterations} runs")
    for variant in spec.variants:
        how = f"kernel {shown_path(variant.kernel)} ({kernels[variant.kernel]})" if variant.kernel else "the target's kernel"
        knobs = f", {len(variant.knobs)} knob(s)" if variant.knobs else ""
        print(f"  variant {variant.name}: {how}{knobs}")
    if kernels:
        print(f"  kernels: {len(kernels)} variant spec(s); built or not: lisa-ext kernel status {path}")
    tools = sorted({t for w in spec.workloads for t in WORKLOAD_KINDS[w.kind].TOOLS if t in BUILDABLE})
    for tool in tools:
        built = cached_build(tool)
        print(f"  tool {tool}: " + (f"built ({built}), installed on the target by the runner" if built else
                                    f"not built yet: lisa-ext campaign tool install {tool} --src DIR "
                                    f"--target {shown_path(spec.target)}"))
    if spec.requires:
        print(f"  requires {', '.join(f'{k}: {v}' for k, v in spec.requires.items())}: checked on the "
              "target before the first run")


def _status(args: argparse.Namespace) -> int:
    status = campaign_status(args.dir, repair=args.repair)
    print(status.render())
    return 0 if not (status.failed or status.missing or status.damaged) else 1


def _tool(args: argparse.Namespace) -> int:
    binary = build_tool(args.tool, args.src)
    print(f"built {args.tool}: {binary}")
    if args.tool_action == "install":
        config = TargetConfig.load(args.target)
        quiet_lisa_logs()
        target = connect(config)
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
                     help=f"the virtual board's timing, instead of the spec's board-timing ({TIMINGS_HELP})")
    run.add_argument("--board-clock", choices=CLOCKS, metavar="{host,virtual}",
                     help=f"the virtual board's clock, instead of the spec's board-clock ({CLOCKS_HELP})")
    run.set_defaults(func=_run)
    check = sub.add_parser("check", help="validate a spec, its target config and its kernel variants, offline",
                           description="Validate a campaign spec (and its smoke: size), its target config and "
                                       "its kernel variant specs without touching a target or building "
                                       "anything; print what it would run. Exit status 2 with one line "
                                       "naming the file and key on the first problem.")
    check.add_argument("specs", nargs="+", metavar="SPEC", help="campaign spec (YAML)")
    check.add_argument("--target", metavar="CONF", help="check it against this target config instead of the spec's")
    check.set_defaults(func=_check)
    status = sub.add_parser("status", help="list done / failed / missing runs of a campaign directory",
                            description="List the done, failed, missing and damaged runs of a campaign "
                                        "directory; exit status 1 when any run failed, is missing or is "
                                        "damaged.")
    status.add_argument("dir", metavar="DIR", help="campaign directory, e.g. data/quickstart")
    status.add_argument("--repair", action="store_true",
                        help="move damaged runs (an unreadable result.json, a stray directory) aside to "
                             "DIR/quarantine/, keeping every other run; --resume then runs them again")
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
