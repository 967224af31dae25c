"""Idle misses: wakeups from an idle state that was too deep or too shallow.

Mirrors ``cpuidle_enter_state()`` in drivers/cpuidle/cpuidle.c (v5.19+), which
measures the time spent in the entered state and emits ``power:cpu_idle_miss``
(include/trace/events/power.h; fields ``cpu_id``, ``state``, ``below``):

* too deep ("above", ``below=0``): the measured duration is shorter than the
  state's target residency, and some shallower state is enabled;
* too shallow ("below", ``below=1``): the duration exceeds the state's exit
  latency and, for the first enabled deeper state, duration - exit latency of
  the entered state >= that deeper state's target residency.

Event mode counts those events. Derived mode (older kernels, or traces
recorded without the event) applies the same rule to the ``cpu_idle``
enter/exit intervals with an idle-state table
(:class:`lisa_ext.analysis.platform.Platform`). The rates of the teo
util-awareness RFC are both counts as a percentage of wakeups, a wakeup being
a ``cpu_idle`` exit (state 4294967295, i.e. -1).
"""

from __future__ import annotations

import argparse
from typing import Any

import holoviews as hv
import numpy as np
import pandas as pd

from lisa_ext import compat
from lisa_ext.analysis._frames import IDLE_EXIT, event_times, has_event, int_column, order_by_key_then_time
from lisa_ext.analysis.base import RunMetric, StudyAnalysis, records
from lisa_ext.analysis.platform import Platform
from lisa_ext.errors import UserError

_base = compat.import_lisa("lisa.analysis.base")
_trace = compat.import_lisa("lisa.trace")
TraceAnalysisBase = _base.TraceAnalysisBase
requires_events = _trace.requires_events

__all__ = ["IdleMissAnalysis", "MISS_COLUMNS"]

#: Columns of :meth:`IdleMissAnalysis.df_idle_miss_counts`.
MISS_COLUMNS = ("wakeups", "too_deep", "too_shallow", "too_deep_pct", "too_shallow_pct")

TOO_DEEP = "too_deep"
TOO_SHALLOW = "too_shallow"


class IdleMissAnalysis(StudyAnalysis):
    """Too-deep / too-shallow idle state selections, per CPU, state and cluster.

    :param trace: input Trace object
    :type trace: lisa.trace.Trace
    """

    name = "idle_miss"
    cli_name = "idle-miss"
    #: the report's figures count ``cpu_idle_miss`` events against ``cpu_idle`` exits
    EVENTS = ("cpu_idle", "cpu_idle_miss")

    @classmethod
    def add_cli_arguments(cls, parser: argparse.ArgumentParser) -> None:
        g = parser.add_argument_group("idle-miss")
        g.add_argument("--mode", choices=("auto", "event", "derived"), default="auto",
                       help="cpu_idle_miss events, misses derived from residencies, or auto: "
                            "events when the trace has them (default)")
        g.add_argument("--by", choices=("cpu", "state", "cluster"), default="cpu",
                       help="grouping of the printed table (JSON always has cpus and total)")

    def _summary(self, platform: Platform, mode: str = "auto", by: str = "cpu"
                 ) -> tuple[dict[str, Any], list[tuple[str, pd.DataFrame]]]:
        mode = self.resolve_mode(mode)
        per_cpu = self.df_idle_miss_counts(mode=mode, by="cpu", platform=platform)
        total = per_cpu[["wakeups", "too_deep", "too_shallow"]].sum()
        total_row: dict[str, Any] = {k: int(total[k]) for k in ("wakeups", "too_deep", "too_shallow")}
        for kind in ("too_deep", "too_shallow"):
            total_row[f"{kind}_pct"] = (100.0 * total_row[kind] / total_row["wakeups"]
                                        if total_row["wakeups"] else None)
        figures: dict[str, Any] = {"mode": mode, "cpus": records(per_cpu, MISS_COLUMNS), "total": total_row}
        tables = [(f"idle misses per {by} ({mode} mode)",
                   self.df_idle_miss_counts(mode=mode, by=by, platform=platform))]
        figures["states"] = records(self.df_idle_miss_counts(mode=mode, by="state", platform=platform),
                                    MISS_COLUMNS)
        if platform.clusters:
            figures["clusters"] = records(
                self.df_idle_miss_counts(mode=mode, by="cluster", platform=platform), MISS_COLUMNS)
        if mode == "event" and platform.has_idle_states:
            agreement = self.df_idle_miss_agreement(platform)
            figures["agreement"] = records(agreement, list(agreement.columns))
            tables.append(("event vs derived mode", agreement))
        return figures, tables

    def summary(self, platform: Platform, mode: str = "auto", by: str = "cpu") -> dict[str, Any]:
        """``mode``; ``cpus``, ``states`` (and ``clusters`` when the platform has
        them): :data:`MISS_COLUMNS` per group; ``total``; ``agreement`` of
        :meth:`df_idle_miss_agreement` in event mode with an idle-state table."""
        return self._summary(platform, mode, by)[0]

    def summary_tables(self, platform: Platform, mode: str = "auto", by: str = "cpu"
                       ) -> list[tuple[str, pd.DataFrame]]:
        return self._summary(platform, mode, by)[1]

    def run_metrics(self) -> list[RunMetric]:
        """Too-deep and too-shallow % of all wakeups (event mode)."""
        counts = self.df_idle_miss_counts(mode="event")
        wakeups = counts["wakeups"].sum()
        if wakeups == 0:
            return []
        return [RunMetric("too deep", float(100.0 * counts["too_deep"].sum() / wakeups), "%", True),
                RunMetric("too shallow", float(100.0 * counts["too_shallow"].sum() / wakeups), "%", True)]

    @TraceAnalysisBase.cache
    @requires_events("cpu_idle")
    def df_idle_periods(self) -> pd.DataFrame:
        """One row per idle period, indexed by entry time (s):

        * ``cpu``: the idle CPU
        * ``state``: index of the entered idle state
        * ``duration``: seconds until the CPU's next ``cpu_idle`` exit event,
          NaN when the trace ends (or another entry comes) first
        """
        df = self.trace.df_event("cpu_idle")
        cpu = int_column(df, "cpu_id")
        state = int_column(df, "state")
        time = event_times(df)
        order = order_by_key_then_time(cpu, np.zeros(len(df), dtype=np.int64))
        cpu, state, time = cpu[order], state[order], time[order]
        nxt = np.arange(1, len(df) + 1)
        nxt[-1:] = 0
        same_cpu = np.zeros(len(df), dtype=bool)
        if len(df) > 1:
            same_cpu[:-1] = cpu[1:] == cpu[:-1]
        exit_next = same_cpu & (state[nxt] == IDLE_EXIT)
        enter = state != IDLE_EXIT
        duration = np.where(exit_next, time[nxt] - time, np.nan)[enter]
        out = pd.DataFrame(
            {"cpu": cpu[enter], "state": state[enter], "duration": duration},
            index=pd.Index(time[enter], name="Time"),
        )
        return out.sort_index(kind="stable")

    @TraceAnalysisBase.cache
    @requires_events("cpu_idle")
    def df_wakeups(self) -> pd.DataFrame:
        """Wakeups (``cpu_idle`` exits) per CPU: column ``wakeups``, index ``cpu``."""
        df = self.trace.df_event("cpu_idle")
        exits = int_column(df, "cpu_id")[int_column(df, "state") == IDLE_EXIT]
        cpus, counts = np.unique(exits, return_counts=True)
        return pd.DataFrame({"wakeups": counts}, index=pd.Index(cpus, name="cpu"))

    @TraceAnalysisBase.cache
    @requires_events("cpu_idle_miss")
    def df_idle_miss_events(self) -> pd.DataFrame:
        """The ``cpu_idle_miss`` events, indexed by time (s):

        * ``cpu``: the CPU that woke up
        * ``state``: the idle state it had entered
        * ``kind``: ``"too_deep"`` (printed ``type=above``) or ``"too_shallow"``
          (``type=below``)
        """
        df = self.trace.df_event("cpu_idle_miss")
        if "below" in df.columns:
            below = df["below"].astype(int).to_numpy() != 0
        else:  # text traces only carry the printed type=above|below
            below = df["type"].astype(str).to_numpy() == "below"
        return pd.DataFrame(
            {
                "cpu": int_column(df, "cpu_id"),
                "state": int_column(df, "state"),
                "kind": np.where(below, TOO_SHALLOW, TOO_DEEP),
            },
            index=pd.Index(event_times(df), name="Time"),
        )

    @df_idle_periods.used_events
    def df_derived_idle_misses(self, platform: Platform) -> pd.DataFrame:
        """:meth:`df_idle_periods` with a ``kind`` column computed by the
        kernel's rule from ``platform``'s idle-state table: ``"too_deep"``,
        ``"too_shallow"``, ``""`` (a good pick) or ``None`` (no exit seen)."""
        if not platform.has_idle_states:
            raise UserError(
                "this trace has no cpu_idle_miss events (kernel before 5.19, event not recorded, "
                "or no cpuidle driver, which never misses); derived mode needs an idle-state "
                "table: give a platform YAML (idle-states: ...) or read it from the target's sysfs"
            )
        periods = self.df_idle_periods().copy()
        kind = np.full(len(periods), None, dtype=object)
        cpu = periods["cpu"].to_numpy()
        state = periods["state"].to_numpy()
        diff = np.round(periods["duration"].to_numpy() * 1e9)
        for c in np.unique(cpu):
            table = platform.idle_states_of(int(c))
            on_cpu = cpu == c
            bad = np.unique(state[on_cpu][(state[on_cpu] < 0) | (state[on_cpu] >= len(table))])
            if len(bad):
                raise UserError(
                    f"CPU{c} enters idle state {int(bad[0])} but the idle-state table of "
                    f"{platform.source} has {len(table)} states for it"
                )
            target = np.array([s.target_residency_ns for s in table], dtype=float)
            latency = np.array([s.exit_latency_ns for s in table], dtype=float)
            shallower_enabled = np.array(
                [any(not s.disabled for s in table[:i]) for i in range(len(table))]
            )
            deeper_target = np.array(
                [
                    next((s.target_residency_ns for s in table[i + 1 :] if not s.disabled), np.inf)
                    for i in range(len(table))
                ],
                dtype=float,
            )
            seen = on_cpu & ~np.isnan(diff)
            st = np.where(seen, state, 0)
            deep = seen & (diff < target[st]) & shallower_enabled[st]
            shallow = (
                seen
                & ~(diff < target[st])
                & (diff > latency[st])
                & (diff - latency[st] >= deeper_target[st])
            )
            kind[seen] = ""
            kind[deep] = TOO_DEEP
            kind[shallow] = TOO_SHALLOW
        periods["kind"] = kind
        return periods

    def resolve_mode(self, mode: str = "auto") -> str:
        """``"event"`` when the trace has ``cpu_idle_miss``, else ``"derived"``."""
        if mode not in ("auto", "event", "derived"):
            raise UserError(f"idle-miss mode must be auto, event or derived, not {mode!r}")
        if mode == "auto":
            return "event" if has_event(self.trace, "cpu_idle_miss") else "derived"
        return mode

    def _misses(self, mode: str, platform: Platform | None) -> pd.DataFrame:
        if mode == "event":
            return self.df_idle_miss_events()
        misses = self.df_derived_idle_misses(platform or Platform())
        return misses[misses["kind"].isin([TOO_DEEP, TOO_SHALLOW])]

    @df_idle_periods.used_events
    def df_idle_miss_counts(
        self, mode: str = "auto", by: str = "cpu", platform: Platform | None = None
    ) -> pd.DataFrame:
        """Misses as counts and % of wakeups, one row per ``by`` group
        (``"cpu"``, ``"state"`` or ``"cluster"``) plus nothing else:

        * ``wakeups``: ``cpu_idle`` exits (per state: exits from that state)
        * ``too_deep``, ``too_shallow``: misses of each kind
        * ``too_deep_pct``, ``too_shallow_pct``: 100 * misses / wakeups (NaN
          without wakeups)

        :param mode: ``"event"``, ``"derived"`` or ``"auto"`` (:meth:`resolve_mode`)
        :param platform: idle-state table (derived mode) and clusters (``by="cluster"``)
        """
        mode = self.resolve_mode(mode)
        misses = self._misses(mode, platform)
        if by == "cpu":
            wakeups = self.df_wakeups()["wakeups"]
            keys = misses["cpu"]
        elif by == "state":
            periods = self.df_idle_periods()
            wakeups = periods[periods["duration"].notna()].groupby("state").size()
            keys = misses["state"]
        elif by == "cluster":
            if platform is None or not platform.clusters:
                raise UserError("per-cluster idle misses need clusters in the platform description")
            cluster_of = platform.cluster_of()
            per_cpu = self.df_wakeups()["wakeups"]
            wakeups = per_cpu.groupby(per_cpu.index.map(cluster_of)).sum()
            keys = misses["cpu"].map(cluster_of)
        else:
            raise UserError(f"idle misses can be grouped by cpu, state or cluster, not {by!r}")
        counts = pd.crosstab(keys, misses["kind"]) if len(misses) else pd.DataFrame()
        out = pd.DataFrame(index=wakeups.index.union(counts.index))
        out.index.name = by
        out["wakeups"] = wakeups.reindex(out.index, fill_value=0).astype(int)
        for kind in (TOO_DEEP, TOO_SHALLOW):
            col = counts[kind] if kind in counts else pd.Series(dtype=int)
            out[kind] = col.reindex(out.index, fill_value=0).astype(int)
        with np.errstate(divide="ignore", invalid="ignore"):
            for kind in (TOO_DEEP, TOO_SHALLOW):
                out[f"{kind}_pct"] = np.where(
                    out["wakeups"] > 0, 100.0 * out[kind] / out["wakeups"].where(out["wakeups"] > 0), np.nan
                )
        return out

    @df_idle_periods.used_events
    def df_idle_miss_agreement(self, platform: Platform) -> pd.DataFrame:
        """Event mode against derived mode, per CPU, when both are possible.

        Each ``cpu_idle_miss`` event belongs to the idle period whose exit it
        follows on the same CPU. Columns: ``periods`` (with an exit),
        ``event_too_deep``, ``derived_too_deep``, ``event_too_shallow``,
        ``derived_too_shallow``, ``agree_frac`` (share of periods classified
        the same way by both).
        """
        derived = self.df_derived_idle_misses(platform)
        derived = derived[derived["duration"].notna()]
        events = self.df_idle_miss_events()
        rows = []
        for cpu, periods in derived.groupby("cpu"):
            exits = periods.index.to_numpy() + periods["duration"].to_numpy()
            order = np.argsort(exits, kind="stable")
            exits_sorted = exits[order]
            ev = events[events["cpu"] == cpu]
            from_event = np.full(len(periods), "", dtype=object)
            slot = np.searchsorted(exits_sorted, event_times(ev), side="right") - 1
            ok = slot >= 0
            from_event[order[slot[ok]]] = ev["kind"].to_numpy()[ok]
            from_rule = periods["kind"].to_numpy()
            rows.append(
                {
                    "cpu": cpu,
                    "periods": len(periods),
                    "event_too_deep": int((ev["kind"] == TOO_DEEP).sum()),
                    "derived_too_deep": int((from_rule == TOO_DEEP).sum()),
                    "event_too_shallow": int((ev["kind"] == TOO_SHALLOW).sum()),
                    "derived_too_shallow": int((from_rule == TOO_SHALLOW).sum()),
                    "agree_frac": float(np.mean(from_event == from_rule)) if len(periods) else np.nan,
                }
            )
        return pd.DataFrame(rows).set_index("cpu") if rows else pd.DataFrame(columns=["cpu"]).set_index("cpu")

    @TraceAnalysisBase.plot_method
    @df_idle_miss_counts.used_events
    def plot_idle_miss_rates(self, mode: str = "auto", by: str = "cpu", platform: Platform | None = None):
        """Too-deep and too-shallow % of wakeups per ``by`` group, as bars."""
        df = self.df_idle_miss_counts(mode=mode, by=by, platform=platform)
        tidy = df[["too_deep_pct", "too_shallow_pct"]].reset_index().melt(
            id_vars=by, var_name="kind", value_name="pct"
        )
        tidy[by] = tidy[by].astype(str)
        return hv.Bars(tidy, kdims=[by, "kind"], vdims=["pct"]).options(
            title=f"Idle misses ({self.resolve_mode(mode)} mode)",
            ylabel="% of wakeups",
            multi_level=False,
        )
