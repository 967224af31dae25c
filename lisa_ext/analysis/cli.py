"""``lisa-ext analyse NAME TRACE [--json]``: run one of the study analyses on a trace.

``lisa-ext analyse NAME --data DIR`` runs it on every traced run of a
campaign instead, serially or as Dask tasks (:mod:`lisa_ext.analysis.campaign`,
``--scheduler``); ``--json`` then prints ``{run label: summary}``.

NAME is the ``cli_name`` of an analysis of
:data:`lisa_ext.analysis.registry.ANALYSIS_CLASSES`; its options come from its
``add_cli_arguments``. The trace is loaded with :func:`lisa_ext.trace.load_trace`
(``--loader lisa`` uses LISA's own parsers instead). Tables are printed for
people, ``--json`` prints the analysis's ``summary()``, in the layout documented
in docs/analyses.md.
"""

from __future__ import annotations

import argparse
import inspect
import json
import sys
from typing import Any

import pandas as pd

from lisa_ext.analysis.base import StudyAnalysis
from lisa_ext.analysis.registry import ANALYSES, ANALYSIS_CLASSES, by_cli_name
from lisa_ext.analysis import platform as plat
from lisa_ext.analysis.base import json_ready
from lisa_ext.analysis.campaign import analyse_campaign
from lisa_ext.trace.cluster import add_scheduler_argument
from lisa_ext.compat import import_lisa
from lisa_ext.errors import UserError
from lisa_ext.trace import load_trace
from lisa_ext.trace.tracedat import count_events

__all__ = ["NAMES", "analysis_options", "handler", "register", "run_analysis", "trace_lost_events"]

NAMES = tuple(ANALYSES)

#: analysis class -> the argparse destinations its add_cli_arguments added
_OPTION_DESTS: dict[type[StudyAnalysis], tuple[str, ...]] = {}


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "analyse",
        help=f"run a trace analysis ({', '.join(NAMES[:2])}, ...)",
        description="Run one registered trace analysis on a trace and print its figures: "
                    "a table, or JSON with --json.",
    )
    p.add_argument("name", metavar="NAME", choices=NAMES, help=" | ".join(NAMES))
    p.add_argument("trace", metavar="TRACE", nargs="?",
                   help="trace.dat, ftrace text or systrace HTML")
    p.add_argument("--data", metavar="DIR",
                   help="analyse every traced run of this campaign directory instead of TRACE")
    add_scheduler_argument(p)
    p.add_argument("--json", action="store_true", help="print the figures as JSON")
    p.add_argument("--loader", choices=("auto", "fast", "lisa"), default="auto",
                   help="trace loader (default: the fast one when installed)")
    p.add_argument("--tasks", metavar="SELECTOR",
                   help="only these tasks, for the analyses that take a task selector (wakeup-latency, "
                        "wakeup-frequency): comm:REGEX, pid:N, tgid:N, tree:N (N and every task it created) "
                        "or exec:NAME (what ran NAME and every task it created)")
    p.add_argument("--platform", metavar="YAML",
                   help="idle states, clusters and LLC domains (see lisa_ext/analysis/platform.py)")
    p.add_argument("--sysfs", action="store_true",
                   help="read idle states and topology from this machine's sysfs "
                        "(only right for traces recorded here)")
    for cls in ANALYSIS_CLASSES:
        before = {a.dest for a in p._actions}
        cls.add_cli_arguments(p)
        _OPTION_DESTS[cls] = tuple(a.dest for a in p._actions if a.dest not in before)
    p.set_defaults(func=handler)


def _chosen_platform(args: argparse.Namespace) -> plat.Platform:
    """The user's platform (--platform / --sysfs), before the trace's own completes it."""
    if args.platform:
        return plat.load_platform_yaml(args.platform)
    if args.sysfs:
        return plat.platform_from_sysfs()
    return plat.Platform()


def _platform(args: argparse.Namespace, trace: Any) -> plat.Platform:
    return plat.merge(_chosen_platform(args), plat.platform_from_plat_info(trace.plat_info))


def analysis_options(cls: type[StudyAnalysis], trace: Any, args: argparse.Namespace) -> dict[str, Any]:
    """The keyword options of ``cls.summary`` from the parsed command line:
    its own options, plus ``platform`` and ``tasks`` when its summary takes them."""
    options = {dest: getattr(args, dest) for dest in _OPTION_DESTS.get(cls, ())}
    if "tasks" in inspect.signature(cls.summary).parameters:
        options["tasks"] = args.tasks
    if "platform" in inspect.signature(cls.summary).parameters:
        options["platform"] = _platform(args, trace)
    return options


def run_analysis(name: str, trace: Any, args: argparse.Namespace) -> tuple[dict[str, Any], list[tuple[str, Any]]]:
    """(JSON figures, [(title, DataFrame)] for printing) of analysis ``name``."""
    cls = by_cli_name(name)
    ana = getattr(trace.ana, cls.name)
    options = analysis_options(cls, trace, args)
    return ana.summary(**options), ana.summary_tables(**options)


def trace_lost_events(path: str) -> int | None:
    """Events the kernel lost while ``path`` was recorded (trace.dat only, else None)."""
    with open(path, "rb") as f:
        if f.read(10) != b"\x17\x08\x44tracing":
            return None
    return int(count_events(path)["lost_events"]["total"])


def _print_tables(tables: list[tuple[str, pd.DataFrame]], heading: str = "") -> None:
    with pd.option_context("display.max_rows", 200, "display.width", 160, "display.max_columns", 20):
        for title, df in tables:
            print(f"== {heading}{title}")
            print(df.to_string() if len(df) else "(none)")
            print()


def _campaign_handler(args: argparse.Namespace) -> int:
    cls = by_cli_name(args.name)
    options = {dest: getattr(args, dest) for dest in _OPTION_DESTS.get(cls, ())}
    results = analyse_campaign(args.name, args.data, options,
                               platform=_chosen_platform(args), scheduler=args.scheduler)
    if args.json:
        json.dump({r.label: json_ready(r.summary) for r in results}, sys.stdout, indent=1)
        sys.stdout.write("\n")
        return 0
    for r in results:
        _print_tables(r.tables, f"{r.label}: ")
    return 0


def handler(args: argparse.Namespace) -> int:
    if (args.trace is None) == (args.data is None):
        raise UserError("give either TRACE or --data DIR")
    if args.data is not None:
        if args.loader != "auto":
            raise UserError("--loader applies to one TRACE, not to --data")
        return _campaign_handler(args)
    lisa_trace = import_lisa("lisa.trace")
    cls = by_cli_name(args.name)
    try:
        events = sorted(cls.get_all_events())
        if args.loader == "lisa":
            trace = load_trace(args.trace, loader="lisa", events=events)
        else:
            trace = load_trace(args.trace)
        ana = getattr(trace.ana, cls.name)
        options = analysis_options(cls, trace, args)
        if args.json:
            figures = ana.summary(**options)
        else:
            tables = ana.summary_tables(**options)
    except lisa_trace.MissingTraceEventError as exc:
        raise UserError(f"{args.trace}: {args.name}: {exc}") from None
    lost = trace_lost_events(args.trace)
    if lost:
        print(f"warning: {args.trace}: the trace lost {lost} events (ftrace buffer overflow); "
              "the figures below under-count", file=sys.stderr)
    if args.json:
        figures["lost_events"] = lost
        json.dump(json_ready(figures), sys.stdout, indent=1, sort_keys=False)
        sys.stdout.write("\n")
        return 0
    _print_tables(tables)
    return 0
