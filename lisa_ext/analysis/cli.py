"""``lisa-ext analyse NAME TRACE [--json]``: run one of the study analyses on a trace.

NAME is idle-miss, wakeup-latency, wq-placement or iowait-boost. The trace is
loaded with the fast loader (:func:`lisa_ext.trace.load_trace`) when it is
installed, else with LISA's own; ``--loader`` forces one. Tables are printed
for people, ``--json`` prints the figures in the layout documented in the
README "Analyses" section.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from typing import Any

from lisa_ext.errors import UserError

__all__ = ["NAMES", "load", "register", "run_analysis", "trace_lost_events"]

NAMES = ("idle-miss", "wakeup-latency", "wq-placement", "iowait-boost")


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "analyse",
        help="run a trace analysis (idle-miss, wakeup-latency, ...)",
        description=__doc__.splitlines()[0],
    )
    p.add_argument("name", metavar="NAME", choices=NAMES, help=" | ".join(NAMES))
    p.add_argument("trace", metavar="TRACE", help="trace.dat, ftrace text or systrace HTML")
    p.add_argument("--json", action="store_true", help="print the figures as JSON")
    p.add_argument("--loader", choices=("auto", "fast", "lisa"), default="auto",
                   help="trace loader (default: the fast one when installed)")
    p.add_argument("--platform", metavar="YAML",
                   help="idle states, clusters and LLC domains (see lisa_ext/analysis/platform.py)")
    p.add_argument("--sysfs", action="store_true",
                   help="read idle states and topology from this machine's sysfs "
                        "(only right for traces recorded here)")
    g = p.add_argument_group("idle-miss")
    g.add_argument("--mode", choices=("auto", "event", "derived"), default="auto")
    g.add_argument("--by", choices=("cpu", "state", "cluster"), default="cpu",
                   help="grouping of the printed table (JSON always has cpus and total)")
    g = p.add_argument_group("wakeup-latency")
    g.add_argument("--pid", type=int, help="only this task")
    g.add_argument("--comm", metavar="REGEX", help="only tasks whose comm matches")
    g.add_argument("--per-cpu", action="store_true", help="split each task's figures per CPU")
    g = p.add_argument_group("iowait-boost")
    g.add_argument("--window-ms", type=float, default=4.0,
                   help="frequency window after each wakeup (default 4 ms)")
    p.set_defaults(func=handler)


def load(path: str, events: list[str], loader: str = "auto") -> Any:
    """A :class:`lisa.trace.Trace` of ``path`` with the analyses registered."""
    import lisa_ext.analysis  # noqa: F401  (registers the analyses before the Trace exists)

    if not os.path.exists(path):
        raise UserError(f"{path}: no such trace file")
    if loader in ("auto", "fast"):
        try:
            from lisa_ext.trace import load_trace
        except ImportError:
            if loader == "fast":
                raise UserError("the fast trace loader (lisa_ext.trace.load_trace) is not installed") from None
        else:
            return load_trace(path)
    from lisa_ext import compat

    lisa_trace = compat.import_lisa("lisa.trace")
    # LISA's swap would be written next to the trace (often a read-only input).
    kwargs: dict[str, Any] = {"enable_swap": False}
    if path.endswith(".html"):
        kwargs["parser"] = lisa_trace.SysTraceParser.from_html
    return lisa_trace.Trace(path, events=events, **kwargs)


def trace_lost_events(path: str) -> int | None:
    """Events the kernel lost while ``path`` was recorded (trace.dat only, else None)."""
    from lisa_ext.trace.tracedat import count_events

    with open(path, "rb") as f:
        if f.read(10) != b"\x17\x08\x44tracing":
            return None
    return int(count_events(path)["lost_events"]["total"])


def _platform(args: argparse.Namespace, trace: Any):
    from lisa_ext.analysis import platform as plat

    chosen = plat.Platform()
    if args.platform:
        chosen = plat.load_platform_yaml(args.platform)
    elif args.sysfs:
        chosen = plat.platform_from_sysfs()
    return plat.merge(chosen, plat.platform_from_plat_info(trace.plat_info))


def _clean(value: Any) -> Any:
    """JSON-safe: NaN -> null, numpy scalars -> Python."""
    if isinstance(value, dict):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    if hasattr(value, "item"):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def _records(df, columns) -> dict[str, dict[str, Any]]:
    return {str(k): row for k, row in df[list(columns)].to_dict(orient="index").items()}


def run_analysis(name: str, trace: Any, args: argparse.Namespace) -> tuple[dict[str, Any], list[tuple[str, Any]]]:
    """(JSON figures, [(title, DataFrame)] for printing)."""
    if name == "idle-miss":
        from lisa_ext.analysis.idle_miss import MISS_COLUMNS

        ana = trace.ana.idle_miss
        platform = _platform(args, trace)
        mode = ana.resolve_mode(args.mode)
        per_cpu = ana.df_idle_miss_counts(mode=mode, by="cpu", platform=platform)
        total = per_cpu[["wakeups", "too_deep", "too_shallow"]].sum()
        total_row = {k: int(total[k]) for k in ("wakeups", "too_deep", "too_shallow")}
        for kind in ("too_deep", "too_shallow"):
            total_row[f"{kind}_pct"] = 100.0 * total_row[kind] / total_row["wakeups"] if total_row["wakeups"] else None
        figures: dict[str, Any] = {"mode": mode, "cpus": _records(per_cpu, MISS_COLUMNS), "total": total_row}
        tables = [(f"idle misses per {args.by} ({mode} mode)",
                   ana.df_idle_miss_counts(mode=mode, by=args.by, platform=platform))]
        figures["states"] = _records(ana.df_idle_miss_counts(mode=mode, by="state", platform=platform), MISS_COLUMNS)
        if platform.clusters:
            figures["clusters"] = _records(ana.df_idle_miss_counts(mode=mode, by="cluster", platform=platform), MISS_COLUMNS)
        if mode == "event" and platform.has_idle_states:
            agreement = ana.df_idle_miss_agreement(platform)
            figures["agreement"] = _records(agreement, list(agreement.columns))
            tables.append(("event vs derived mode", agreement))
        return figures, tables
    if name == "wakeup-latency":
        from lisa_ext.analysis.wakeup_latency import STAT_COLUMNS

        ana = trace.ana.wakeup_latency
        stats = ana.df_wakeup_latency_stats(pid=args.pid, comm=args.comm)
        figures = {"event": ana.wakeup_event(), "tasks": _records(stats, ["comm", *STAT_COLUMNS])}
        per_cpu = ana.df_cpu_wakeup_latency_stats(pid=args.pid, comm=args.comm)
        figures["cpus"] = _records(per_cpu, list(STAT_COLUMNS))
        tables = [("wakeup latency per task (s)", stats), ("wakeup latency per CPU (s)", per_cpu)]
        if args.per_cpu:
            tables.append(("per task and CPU (s)", ana.df_wakeup_latency_stats(pid=args.pid, comm=args.comm, per_cpu=True)))
        return figures, tables
    if name == "wq-placement":
        from lisa_ext.analysis.wq_placement import PLACEMENT_COLUMNS

        ana = trace.ana.wq_placement
        platform = _platform(args, trace)
        by_fn = ana.df_placement_stats(by="function", platform=platform)
        by_wq = ana.df_placement_stats(by="workqueue", platform=platform)
        matrix = ana.df_placement_matrix()
        figures = {
            "functions": _records(by_fn, PLACEMENT_COLUMNS),
            "workqueues": _records(by_wq, PLACEMENT_COLUMNS),
            "matrix": {str(q): {str(e): int(v) for e, v in row.items()} for q, row in matrix.iterrows()},
        }
        return figures, [("per function", by_fn), ("per workqueue", by_wq), ("queueing CPU x executing CPU", matrix)]
    if name == "iowait-boost":
        from lisa_ext.analysis._frames import has_event
        from lisa_ext.analysis.iowait_boost import DEVICE_COLUMNS, TASK_COLUMNS

        ana = trace.ana.iowait_boost
        tasks = ana.df_task_iowait()
        figures = {"iowait_source": "sched_stat_iowait" if has_event(trace, "sched_stat_iowait") else "d_state",
                   "tasks": _records(tasks, TASK_COLUMNS)}
        tables = [("tasks", tasks.sort_values("iowait_count", ascending=False))]
        if has_event(trace, "block_rq_issue") and has_event(trace, "block_rq_complete"):
            devices = ana.df_device_io()
            figures["devices"] = _records(devices, DEVICE_COLUMNS)
            tables.append(("block devices", devices))
        else:
            figures["devices"] = {}
        if has_event(trace, "cpu_frequency"):
            summary = ana.df_wakeup_frequency_summary(window_ms=args.window_ms)
            figures["wakeup_frequency"] = {("after_iowait" if k else "other"): {"wakeups": int(r["wakeups"]), "mean_freq_khz": r["mean_freq_khz"]} for k, r in summary.iterrows()}
            tables.append((f"mean frequency in the {args.window_ms:g} ms after wakeups (kHz)", summary))
            residency = ana.df_frequency_residency()
            tables.append(("frequency residency inside / outside IO-task activity (s)", residency))
        if has_event(trace, "sugov_set_iowait_boost"):
            boost = ana.df_iowait_boost_events()
            figures["iowait_boost_events"] = int(len(boost))
            tables.append(("sugov_set_iowait_boost timeline", boost))
        return figures, tables
    raise UserError(f"unknown analysis {name!r}, expected one of {', '.join(NAMES)}")


def handler(args: argparse.Namespace) -> int:
    from lisa_ext.analysis import ANALYSES

    lisa_trace = None
    try:
        from lisa_ext import compat

        lisa_trace = compat.import_lisa("lisa.trace")
        events = sorted(ANALYSES[args.name].get_all_events())
        trace = load(args.trace, events, loader=args.loader)
        figures, tables = run_analysis(args.name, trace, args)
    except Exception as exc:
        if lisa_trace is not None and isinstance(exc, lisa_trace.MissingTraceEventError):
            raise UserError(f"{args.trace}: {args.name}: {exc}") from None
        raise
    lost = trace_lost_events(args.trace)
    if lost:
        print(f"warning: {args.trace}: the trace lost {lost} events (ftrace buffer overflow); "
              "the figures below under-count", file=sys.stderr)
    if args.json:
        figures["lost_events"] = lost
        json.dump(_clean(figures), sys.stdout, indent=1, sort_keys=False)
        sys.stdout.write("\n")
        return 0
    import pandas as pd

    with pd.option_context("display.max_rows", 200, "display.width", 160, "display.max_columns", 20):
        for title, df in tables:
            print(f"== {title}")
            print(df.to_string() if len(df) else "(none)")
            print()
    return 0
