"""Task placement on asymmetric CPUs: capacity classes, clusters, migrations, EAS's wake-ups.

On a big.LITTLE platform the CPUs fall into capacity classes, the CPUs of equal original
capacity (``/sys/devices/system/cpu/cpuN/cpu_capacity``, drivers/base/arch_topology.c: the
device tree's ``capacity-dmips-mhz`` scaled by each cluster's top OPP), the lowest class
"little", the highest "big" (a third one in between "mid"), and into clusters (frequency
domains). The capacities and clusters come from the trace's platform info
(``platform.yml`` beside a campaign run's trace, LISA's ``cpu-capacities``/``orig`` and
``freq-domains``) or from the caller's :class:`~lisa_ext.analysis.platform.Platform`.

From the scheduler's events (include/trace/events/sched.h):

* **runtime** per task on each class and cluster: a ``sched_switch`` with ``next_pid`` = the
  task starts it on that CPU, the CPU's next ``sched_switch`` ends it (the trace's end for the
  last one); the idle task (pid 0) is left out;
* **class migrations** per task: consecutive switch-ins of the task on CPUs of different
  classes, "up" towards a higher capacity, "down" towards a lower one;
* **wake-up placement**: the CPU a ``sched_wakeup`` / ``sched_wakeup_new`` enqueues the task
  on (``target_cpu``, chosen by ``select_task_rq_fair()``: by ``find_energy_efficient_cpu()``
  from the Energy Model while EAS is enabled and the root domain is not overutilized), and the
  overutilized state at that moment from ``lisa_ext:sched_overutilized``
  (kernels/platform-emu/lisa_sched_tp.c: every update of the flag, only while EAS is enabled;
  unknown before the trace's first one).

The check that the kernel's decisions used the Energy Model: the share of wake-ups placed on
the little class while not overutilized. Without EAS (or without the event) that state is
unknown and only the share over all wake-ups is given.
"""

from __future__ import annotations

from typing import Any, Union

import holoviews as hv
import numpy as np
import pandas as pd

from lisa_ext import compat
from lisa_ext.analysis._frames import event_times, has_event, int_column
from lisa_ext.analysis.base import RunMetric, StudyAnalysis, records
from lisa_ext.analysis.platform import Platform, platform_from_plat_info
from lisa_ext.analysis.tasks import select_pids
from lisa_ext.errors import UserError

_trace = compat.import_lisa("lisa.trace")
requires_events = _trace.requires_events
requires_one_event_of = _trace.requires_one_event_of

__all__ = ["CapacityPlacementAnalysis", "MIGRATION_COLUMNS", "OVERUTILIZED_EVENT", "RUNTIME_COLUMNS",
           "SUMMARY_COLUMNS", "WAKEUP_COLUMNS", "class_names"]

#: a comm prefix, or several: which tasks a figure is about (None: every task)
Comm = Union[str, tuple[str, ...], None]

#: the event of kernels/platform-emu/lisa_sched_tp.c (system lisa_ext)
OVERUTILIZED_EVENT = "sched_overutilized"
#: Columns of :meth:`CapacityPlacementAnalysis.df_task_runtime`.
RUNTIME_COLUMNS = ("pid", "comm", "group", "runtime_s", "share")
#: Columns of :meth:`CapacityPlacementAnalysis.df_class_migrations`.
MIGRATION_COLUMNS = ("pid", "comm", "up", "down", "switch_ins")
#: Columns of :meth:`CapacityPlacementAnalysis.df_wakeup_placement`.
WAKEUP_COLUMNS = ("time", "pid", "comm", "cpu", "class", "cluster", "overutilized")
#: Columns of :meth:`CapacityPlacementAnalysis.df_placement_summary`.
SUMMARY_COLUMNS = ("runtime_s", "runtime_little_pct", "class_migrations_per_s", "wakeups", "wakeups_little_pct",
                   "wakeups_not_overutilized", "wakeups_little_not_overutilized_pct", "overutilized_pct")


def class_names(capacities: dict[int, int]) -> dict[int, str]:
    """Capacity -> class name: ``little`` (lowest) .. ``big`` (highest), ``mid`` for a third;
    ``cap<N>`` for more; a single capacity is ``symmetric``."""
    caps = sorted(set(capacities.values()))
    if len(caps) == 1:
        names = ["symmetric"]
    elif len(caps) == 2:
        names = ["little", "big"]
    elif len(caps) == 3:
        names = ["little", "mid", "big"]
    else:
        names = [f"cap{c}" for c in caps]
    return dict(zip(caps, names))


class CapacityPlacementAnalysis(StudyAnalysis):
    """Where tasks ran and woke up on an asymmetric platform, and whether EAS placed them.

    :param trace: input Trace object
    :type trace: lisa.trace.Trace
    """

    name = "capacity_placement"
    cli_name = "capacity-placement"
    EVENTS = ("sched_switch",)
    ANY_OF_EVENTS = ("sched_wakeup", "sched_wakeup_new")

    # -- the platform ---------------------------------------------------------------

    def platform(self, platform: Platform | None = None) -> Platform:
        """``platform`` completed by the trace's own (its ``platform.yml``); capacities needed."""
        own = platform_from_plat_info(getattr(self.trace, "plat_info", None))
        given = platform or Platform()
        merged = Platform(capacities=given.capacities or own.capacities, clusters=given.clusters or own.clusters,
                          source=given.source if given.capacities else own.source)
        if not merged.capacities:
            raise UserError(f"{getattr(self.trace, 'trace_path', 'trace')}: capacity-placement needs the CPU "
                            "capacities: a campaign run's platform.yml beside its trace, or a platform YAML "
                            "(capacities: {cpu: capacity}) / the target's sysfs")
        return merged

    def _cpu_maps(self, platform: Platform | None) -> tuple[dict[int, str], dict[int, str], dict[int, int]]:
        """CPU -> class name, CPU -> cluster name (``cluster<first CPU>``), class name -> rank."""
        plat = self.platform(platform)
        names = class_names(plat.capacities)
        cpu_class = {cpu: names[cap] for cpu, cap in plat.capacities.items()}
        cpu_cluster = {cpu: f"cluster{min(cpus)}" for cpus in plat.clusters for cpu in cpus}
        for cpu in cpu_class:
            cpu_cluster.setdefault(cpu, f"cpu{cpu}")
        rank = {name: i for i, name in enumerate(names[c] for c in sorted(names))}
        return cpu_class, cpu_cluster, rank

    def _lookup(self, mapping: dict[int, Any], cpus: np.ndarray, what: str) -> np.ndarray:
        try:
            return np.array([mapping[int(c)] for c in cpus], dtype=object)
        except KeyError as exc:
            raise UserError(f"capacity-placement: CPU{exc.args[0]} of the trace has no {what} in the "
                            f"platform (CPUs {sorted(mapping)})") from None

    # -- runtime ----------------------------------------------------------------------

    @requires_events("sched_switch")
    def df_runs(self, tasks: str | None = None) -> pd.DataFrame:
        """Every stretch a task ran on a CPU: ``start`` (s), ``cpu``, ``pid``, ``comm``,
        ``duration_s`` (until the CPU's next ``sched_switch``, or the trace's end); with ``tasks``
        (a :mod:`lisa_ext.analysis.tasks` selector) only the tasks it selects."""
        df = self.trace.df_event("sched_switch")
        t = event_times(df)
        cpu = int_column(df, "__cpu")
        pid = int_column(df, "next_pid")
        comm = df["next_comm"].astype(str).to_numpy(dtype=object)
        order = np.lexsort((np.arange(len(t)), t, cpu))
        t, cpu, pid, comm = t[order], cpu[order], pid[order], comm[order]
        end = np.append(t[1:], 0.0)
        last = np.append(cpu[1:] != cpu[:-1], True)
        end[last] = float(self.trace.end)
        out = pd.DataFrame({"start": t, "cpu": cpu, "pid": pid, "comm": comm,
                            "duration_s": np.maximum(end - t, 0.0)})
        out = out[out["pid"] != 0]
        if tasks:
            out = out[out["pid"].isin(sorted(select_pids(self.trace, tasks)))]
        return out.reset_index(drop=True)

    def _comms(self, runs: pd.DataFrame) -> pd.Series:
        """Each pid's last comm (rt-app renames its threads after they start)."""
        return runs.sort_values("start", kind="stable").groupby("pid")["comm"].last()

    def df_task_runtime(self, by: str = "class", platform: Platform | None = None,
                        comm: Comm = None) -> pd.DataFrame:
        """Runtime of each task per capacity class (``by="class"``) or cluster (``"cluster"``):
        :data:`RUNTIME_COLUMNS`, ``group`` the class or cluster, ``share`` its part of the task's
        runtime (0-1). Tasks whose comm does not start with ``comm`` are left out."""
        if by not in ("class", "cluster"):
            raise UserError(f"capacity-placement: by must be class or cluster, not {by!r}")
        cpu_class, cpu_cluster, _ = self._cpu_maps(platform)
        runs = self.df_runs()
        comms = self._comms(runs)
        groups = self._lookup(cpu_class if by == "class" else cpu_cluster, runs["cpu"].to_numpy(), by)
        table = pd.DataFrame({"pid": runs["pid"].to_numpy(), "group": groups,
                              "runtime_s": runs["duration_s"].to_numpy()})
        out = table.groupby(["pid", "group"], sort=True)["runtime_s"].sum().reset_index()
        out["share"] = out["runtime_s"] / out.groupby("pid")["runtime_s"].transform("sum")
        out.insert(1, "comm", out["pid"].map(comms))
        if comm:
            out = out[out["comm"].str.startswith(_prefixes(comm))]
        return out[list(RUNTIME_COLUMNS)].reset_index(drop=True)

    def df_class_migrations(self, platform: Platform | None = None, comm: Comm = None) -> pd.DataFrame:
        """Per task, switch-ins on a CPU of another class than its previous one: ``up`` (to a
        higher capacity), ``down``, and ``switch_ins`` (all of them): :data:`MIGRATION_COLUMNS`."""
        cpu_class, _, rank = self._cpu_maps(platform)
        runs = self.df_runs()
        comms = self._comms(runs)
        runs = runs.sort_values(["pid", "start"], kind="stable")
        level = np.array([rank[c] for c in self._lookup(cpu_class, runs["cpu"].to_numpy(), "class")], dtype=np.int64)
        pid = runs["pid"].to_numpy()
        same_task = np.r_[False, pid[1:] == pid[:-1]]
        step = np.r_[0, np.diff(level)]
        out = pd.DataFrame({"pid": pid, "up": same_task & (step > 0), "down": same_task & (step < 0),
                            "switch_ins": 1}).groupby("pid", sort=True).sum().reset_index()
        out.insert(1, "comm", out["pid"].map(comms))
        if comm:
            out = out[out["comm"].str.startswith(_prefixes(comm))]
        return out.astype({"up": "int64", "down": "int64", "switch_ins": "int64"})[list(MIGRATION_COLUMNS)] \
            .reset_index(drop=True)

    # -- wake-ups -----------------------------------------------------------------------

    def df_overutilized(self) -> pd.DataFrame:
        """The overutilized flag's updates: ``time`` (s), ``overutilized`` (0/1); empty without
        the ``lisa_ext:sched_overutilized`` event (EAS off, or the module not loaded)."""
        if not has_event(self.trace, OVERUTILIZED_EVENT):
            return pd.DataFrame({"time": np.array([], float), "overutilized": np.array([], np.int64)})
        df = self.trace.df_event(OVERUTILIZED_EVENT)
        return pd.DataFrame({"time": event_times(df), "overutilized": int_column(df, "overutilized")})

    @requires_one_event_of("sched_wakeup", "sched_wakeup_new")
    def df_wakeup_placement(self, platform: Platform | None = None, comm: Comm = None) -> pd.DataFrame:
        """Every wake-up (and new task's first one): :data:`WAKEUP_COLUMNS`, ``cpu`` the CPU it
        is enqueued on, ``overutilized`` 1/0 at that moment, or NaN when unknown."""
        cpu_class, cpu_cluster, _ = self._cpu_maps(platform)
        frames = []
        for event in ("sched_wakeup", "sched_wakeup_new"):
            if has_event(self.trace, event):
                df = self.trace.df_event(event)
                frames.append(pd.DataFrame({"time": event_times(df), "pid": int_column(df, "pid"),
                                            "comm": df["comm"].astype(str).to_numpy(dtype=object),
                                            "cpu": int_column(df, "target_cpu")}))
        wakeups = pd.concat(frames, ignore_index=True).sort_values("time", kind="stable").reset_index(drop=True)
        if comm:
            wakeups = wakeups[wakeups["comm"].str.startswith(_prefixes(comm))].reset_index(drop=True)
        cpus = wakeups["cpu"].to_numpy()
        wakeups["class"] = self._lookup(cpu_class, cpus, "class")
        wakeups["cluster"] = self._lookup(cpu_cluster, cpus, "cluster")
        ou = self.df_overutilized()
        at = np.searchsorted(ou["time"].to_numpy(), wakeups["time"].to_numpy(), side="right") - 1
        state = ou["overutilized"].to_numpy(dtype=float)
        wakeups["overutilized"] = np.where(at >= 0, state[np.maximum(at, 0)] if len(state) else np.nan, np.nan)
        return wakeups[list(WAKEUP_COLUMNS)]

    def overutilized_share(self, window: tuple[float, float] | None = None) -> float:
        """Share (0-1) of ``window`` (default: from the first overutilized update to the trace's end)
        spent overutilized, the state before the window's start set by the update before it; NaN
        where the state is unknown (no update before the window, or none at all)."""
        ou = self.df_overutilized()
        if ou.empty:
            return float("nan")
        times, states = ou["time"].to_numpy(), ou["overutilized"].to_numpy()
        start, end = window or (float(times[0]), float(self.trace.end))
        first = np.searchsorted(times, start, side="right") - 1
        if first < 0 or end <= start:
            return float("nan")
        inside = (times > start) & (times < end)
        bounds = np.concatenate([[start], times[inside], [end]])
        held = np.diff(bounds)
        values = np.concatenate([[states[first]], states[inside]])
        return float((held * values).sum() / held.sum())

    def df_placement_summary(self, platform: Platform | None = None, comm: Comm = None) -> pd.DataFrame:
        """One row of figures about the tasks ``comm`` selects, over their own window (their
        first to last switch-in): :data:`SUMMARY_COLUMNS`, runtime and its share on the little
        class, class migrations per second, wake-ups and their share on little CPUs, those made
        while not overutilized and their share on little CPUs (EAS's own placements), and the
        share of the window spent overutilized (NaN where the state is unknown: EAS off)."""
        runtime = self.df_task_runtime("class", platform, comm)
        total = runtime["runtime_s"].sum()
        little = runtime.loc[runtime["group"] == "little", "runtime_s"].sum()
        runs = self.df_runs()
        runs = runs[runs["comm"].str.startswith(_prefixes(comm))] if comm else runs
        window = (float(runs["start"].min()), float(runs["start"].max())) if len(runs) else None
        span = window[1] - window[0] if window else float("nan")
        moves = self.df_class_migrations(platform, comm)
        wake = self.df_wakeup_placement(platform, comm)
        shares = _wakeup_shares(wake)
        known = not self.df_overutilized().empty  # no update at all: EAS off, the state is unknown
        return pd.DataFrame([{
            "runtime_s": float(total),
            "runtime_little_pct": 100 * little / total if total else float("nan"),
            "class_migrations_per_s": float(moves[["up", "down"]].sum().sum()) / span if span else float("nan"),
            "wakeups": shares["count"],
            "wakeups_little_pct": 100 * shares["little_share"],
            "wakeups_not_overutilized": shares["known_not_overutilized"] if known else float("nan"),
            "wakeups_little_not_overutilized_pct": 100 * shares["little_share_not_overutilized"],
            "overutilized_pct": 100 * self.overutilized_share(window) if window else float("nan"),
        }], columns=list(SUMMARY_COLUMNS))

    # -- summaries ----------------------------------------------------------------------

    def summary(self, platform: Platform | None = None, comm: Comm = None) -> dict[str, Any]:
        """``classes`` (CPUs per class), per task runtime share per class and cluster,
        class migrations, and the wake-up placement shares."""
        plat = self.platform(platform)
        names = class_names(plat.capacities)
        classes: dict[str, list[int]] = {}
        for cpu, cap in sorted(plat.capacities.items()):
            classes.setdefault(names[cap], []).append(cpu)
        by_class = self.df_task_runtime("class", platform, comm)
        by_cluster = self.df_task_runtime("cluster", platform, comm)
        wake = self.df_wakeup_placement(platform, comm)
        return {
            "classes": classes,
            "capacities": {str(c): int(v) for c, v in sorted(plat.capacities.items())},
            "runtime_by_class": by_class.to_dict(orient="records"),
            "runtime_by_cluster": by_cluster.to_dict(orient="records"),
            "class_migrations": records(self.df_class_migrations(platform, comm).set_index("pid"),
                                        ["comm", "up", "down", "switch_ins"]),
            "wakeups": _wakeup_shares(wake),
            "overutilized_time_share": self.overutilized_share(),
        }

    def summary_tables(self, platform: Platform | None = None, comm: Comm = None
                       ) -> list[tuple[str, pd.DataFrame]]:
        by_class = self.df_task_runtime("class", platform, comm)
        shares = by_class.pivot_table(index=["pid", "comm"], columns="group", values="share", fill_value=0.0)
        wake = pd.DataFrame([_wakeup_shares(self.df_wakeup_placement(platform, comm))])
        return [("runtime share per capacity class", shares),
                ("runtime per cluster (s)", self.df_task_runtime("cluster", platform, comm)),
                ("class migrations per task", self.df_class_migrations(platform, comm)),
                ("wake-ups", wake)]

    def run_metrics(self) -> list[RunMetric]:
        """On an asymmetric platform (the trace's ``platform.yml``): the share of task runtime
        on the little class, class migrations per second, the share of wake-ups placed on little
        CPUs, and, with the overutilized event, that share while not overutilized and the
        share of time overutilized. Nothing on a symmetric platform or without capacities."""
        plat = platform_from_plat_info(getattr(self.trace, "plat_info", None))
        if len(set(plat.capacities.values())) < 2:
            return []
        by_class = self.df_task_runtime("class")
        total = by_class["runtime_s"].sum()
        little = by_class.loc[by_class["group"] == "little", "runtime_s"].sum()
        migrations = self.df_class_migrations()
        span = float(self.trace.end - self.trace.start) or float("nan")
        metrics = [RunMetric("runtime on little %", 100 * little / total if total else float("nan"), "%", False),
                   RunMetric("class migrations per s", float(migrations[["up", "down"]].sum().sum()) / span,
                             "1/s", True)]
        if any(has_event(self.trace, e) for e in self.ANY_OF_EVENTS):
            shares = _wakeup_shares(self.df_wakeup_placement())
            metrics.append(RunMetric("wakeups on little %", 100 * shares["little_share"], "%", False))
            if shares["known_not_overutilized"]:
                metrics.append(RunMetric("wakeups on little when not overutilized %",
                                         100 * shares["little_share_not_overutilized"], "%", False))
                metrics.append(RunMetric("time overutilized %", 100 * self.overutilized_share(), "%", True))
        return metrics

    def run_frames(self) -> dict[str, pd.DataFrame]:
        """``class_runtime``: :meth:`df_task_runtime` by class (empty on a symmetric platform)."""
        plat = platform_from_plat_info(getattr(self.trace, "plat_info", None))
        if len(set(plat.capacities.values())) < 2:
            return {}
        return {"class_runtime": self.df_task_runtime("class")}

    def plot_class_runtime(self, platform: Platform | None = None, comm: Comm = None) -> hv.Bars:
        """Runtime (s) of each task per capacity class, stacked."""
        df = self.df_task_runtime("class", platform, comm)
        df = df.assign(task=df["comm"] + "/" + df["pid"].astype(str))
        return hv.Bars(df, kdims=["task", "group"], vdims="runtime_s").opts(
            stacked=True, title="runtime per capacity class", ylabel="s", xrotation=45)


def _prefixes(comm: str | tuple[str, ...]) -> tuple[str, ...]:
    return (comm,) if isinstance(comm, str) else tuple(comm)


def _wakeup_shares(wake: pd.DataFrame) -> dict[str, Any]:
    """Counts and little-class shares of wake-ups, overall and while not overutilized."""
    not_ou = wake[wake["overutilized"] == 0]
    return {
        "count": int(len(wake)),
        "little_share": float((wake["class"] == "little").mean()) if len(wake) else float("nan"),
        "known_not_overutilized": int(len(not_ou)),
        "overutilized": int((wake["overutilized"] == 1).sum()),
        "little_share_not_overutilized": float((not_ou["class"] == "little").mean()) if len(not_ou) else float("nan"),
    }
