"""CPU energy estimated from a trace's frequency and idle residencies, priced by a power model.

The events are the ones the kernel emits when a CPU changes OPP or idle state
(include/trace/events/power.h): ``cpu_frequency`` (``state`` = kHz,
``cpu_id``; emitted by the cpufreq core, drivers/cpufreq/cpufreq.c, for every
CPU of the policy) and ``cpu_idle`` (``state`` = entered idle state index or
4294967295 on exit, ``cpu_id``; drivers/cpuidle/cpuidle.c and
kernel/sched/idle.c). The power model is an
:class:`lisa_ext.energy_model.EnergyModel` (a model file, or the
target's Energy Model, kernel/power/energy_model.c).

Definition, per CPU over the trace's window (its first to last event, or a
window given by the caller, e.g. a workload's start and end): busy
time at each frequency x that OPP's power + time in each idle state x that
state's power. Before a CPU's first ``cpu_frequency`` event its frequency is
that event's value (a CPU with none takes the first event of another CPU of
its cluster; with none in the cluster it is an error). Before its first
``cpu_idle`` event it is busy if that event enters a state and in state 0 if
it leaves one; a CPU with no ``cpu_idle`` event is busy throughout. A
frequency or state the model lacks is an error naming it and the model.
"""

from __future__ import annotations

import os

import holoviews as hv
import numpy as np
import pandas as pd

from lisa_ext import compat
from lisa_ext.analysis._frames import IDLE_EXIT, event_times, int_column
from lisa_ext.analysis.base import StudyAnalysis
from lisa_ext.energy_model import EnergyModel, load_model, model_from_target
from lisa_ext.errors import UserError
from lisa_ext.target import connect

_trace = compat.import_lisa("lisa.trace")
requires_events = _trace.requires_events

__all__ = ["BUSY", "EnergyAnalysis", "RESIDENCY_COLUMNS", "resolve_model"]

#: ``state`` of busy rows in :meth:`EnergyAnalysis.df_residency_energy`.
BUSY = -1

#: Columns of :meth:`EnergyAnalysis.df_residency_energy`.
RESIDENCY_COLUMNS = ("cpu", "cluster", "freq_khz", "state", "time_s", "power_mw", "energy_mj")


def resolve_model(spec: str | os.PathLike) -> EnergyModel:
    """``--model``: a JSON model file, or a target config YAML (target-configs/)
    whose live target's Energy Model is read (:func:`lisa_ext.energy_model.model_from_target`)."""
    path = os.fspath(spec)
    if not path.endswith((".yml", ".yaml")):
        return load_model(path)
    return model_from_target(connect(path), name=path)


class EnergyAnalysis(StudyAnalysis):
    """Energy per CPU, cluster and in total from ``cpu_frequency`` + ``cpu_idle``.

    :param trace: input Trace object
    :type trace: lisa.trace.Trace
    """

    name = "energy"
    cli_name = "energy"
    #: The events every figure needs, declared once.
    EVENTS = ("cpu_frequency", "cpu_idle")

    @classmethod
    def add_cli_arguments(cls, parser) -> None:
        """``--model MODEL.json``: the power model (see :mod:`lisa_ext.energy_model`)."""
        parser.add_argument("--model", metavar="MODEL",
                            help="energy: power model file (JSON: {clusters: {name: {cpus, opp_mw, idle_mw}}}), "
                                 "or a target config YAML to read that target's Energy Model")

    def window(self, window: tuple[float, float] | None = None) -> tuple[float, float]:
        """``window`` checked against the trace, by default its first and last event time (s)."""
        first, last = float(self.trace.start), float(self.trace.end)
        if window is None:
            return first, last
        start, end = float(window[0]), float(window[1])
        if not first <= start <= end <= last:
            raise UserError(f"energy: window {start}..{end} s is not inside the trace ({first}..{last} s)")
        return start, end

    @StudyAnalysis.cache
    @requires_events(*EVENTS)
    def df_residency(self, window: tuple[float, float] | None = None) -> pd.DataFrame:
        """Time each CPU spent at each (frequency, idle state) over :meth:`window`
        (a CPU's state at the window's start is set by the events before it):

        * ``cpu``: the CPU
        * ``freq_khz``: its frequency (the policy's OPP, also while idle)
        * ``state``: the idle state, or ``BUSY`` (-1) when not idle
        * ``time_s``: seconds spent so
        """
        seg = self._segments(window)
        out = seg.groupby(["cpu", "freq_khz", "state"], sort=True)["time_s"].sum().reset_index()
        return out.astype({"cpu": "int64", "freq_khz": "int64", "state": "int64", "time_s": "float64"})

    def _segments(self, window: tuple[float, float] | None) -> pd.DataFrame:
        """Every CPU's (freq, state) segments over :meth:`window` (see :func:`_cpu_segments`),
        with a ``cpu`` column, CPU by CPU in time order."""
        start, end = self.window(window)
        freq = self.trace.df_event("cpu_frequency")
        idle = self.trace.df_event("cpu_idle")
        f_cpu, f_val, f_t = int_column(freq, "cpu_id"), int_column(freq, "state"), event_times(freq)
        i_cpu, i_val, i_t = int_column(idle, "cpu_id"), int_column(idle, "state"), event_times(idle)
        i_val = np.where(i_val == IDLE_EXIT, BUSY, i_val)
        rows = []
        for cpu in sorted(set(f_cpu.tolist()) | set(i_cpu.tolist())):
            ft, fv = f_t[f_cpu == cpu], f_val[f_cpu == cpu]
            it, iv = i_t[i_cpu == cpu], i_val[i_cpu == cpu]
            rows.append(_cpu_segments(ft, fv, it, iv, start, end).assign(cpu=cpu))
        if not rows:
            return pd.DataFrame({"start": [], "freq_khz": [], "state": [], "time_s": [], "cpu": []})
        return pd.concat(rows, ignore_index=True)

    def _fill_missing_frequencies(self, residency: pd.DataFrame, model: EnergyModel) -> pd.DataFrame:
        """CPUs without a ``cpu_frequency`` event (``freq_khz`` 0) take their cluster's first one."""
        missing = residency["freq_khz"] == 0
        if not missing.any():
            return residency
        freq = self.trace.df_event("cpu_frequency")
        f_cpu, f_val = int_column(freq, "cpu_id"), int_column(freq, "state")
        residency = residency.copy()
        for cpu in sorted(set(residency.loc[missing, "cpu"].tolist())):
            peers = model.clusters[model.cluster_of(cpu)].cpus
            first = np.flatnonzero(np.isin(f_cpu, peers))
            if not len(first):
                raise UserError(f"{getattr(self.trace, 'trace_path', 'trace')}: CPU{cpu} has no cpu_frequency event and neither "
                                f"has any CPU of its cluster {model.cluster_of(cpu)!r} in {model.source}: "
                                "its frequency is unknown")
            residency.loc[missing & (residency["cpu"] == cpu), "freq_khz"] = int(f_val[first[0]])
        return residency

    @df_residency.used_events
    def df_residency_energy(self, model: EnergyModel | str,
                            window: tuple[float, float] | None = None) -> pd.DataFrame:
        """:meth:`df_residency` priced by ``model`` (an EnergyModel, a model file
        path or a target config, see :func:`resolve_model`):
        ``cpu``, ``cluster``, ``freq_khz``, ``state`` (``BUSY`` = -1), ``time_s``,
        ``power_mw`` (per CPU) and ``energy_mj`` = time_s x power_mw."""
        if isinstance(model, str):
            model = resolve_model(model)
        df = self._fill_missing_frequencies(self.df_residency(window), model)
        out = _priced(df, model)
        return out[list(RESIDENCY_COLUMNS)]

    @df_residency.used_events
    def df_power_timeline(self, model: EnergyModel | str,
                          window: tuple[float, float] | None = None) -> pd.DataFrame:
        """Each CPU's estimated power over time, priced by ``model`` as
        :meth:`df_residency_energy`: one row per change of a CPU's (frequency,
        idle state), indexed by its start (s), holding until that CPU's next row
        (its last until the window's end). Columns as :data:`RESIDENCY_COLUMNS`
        (``time_s``: how long the row holds)."""
        if isinstance(model, str):
            model = resolve_model(model)
        seg = self._fill_missing_frequencies(self._segments(window), model)
        seg = seg.astype({"cpu": "int64", "freq_khz": "int64", "state": "int64"})
        out = _priced(seg, model)
        return out[list(RESIDENCY_COLUMNS)].set_index(pd.Index(seg["start"].to_numpy(float), name="Time"))

    @df_residency.used_events
    def df_energy(self, model: EnergyModel | str, by: str = "cpu",
                  window: tuple[float, float] | None = None) -> pd.DataFrame:
        """Energy grouped ``by`` ``"cpu"`` or ``"cluster"``: columns ``energy_mj``,
        ``busy_s`` (time not idle), ``idle_s`` and ``avg_power_mw`` (energy over
        the window), indexed by the group."""
        if by not in ("cpu", "cluster"):
            raise UserError(f"energy: by must be cpu or cluster, not {by!r}")
        df = self.df_residency_energy(model, window)
        busy = df["state"] == BUSY
        grouped = pd.DataFrame({
            by: df[by],
            "energy_mj": df["energy_mj"],
            "busy_s": np.where(busy, df["time_s"], 0.0),
            "idle_s": np.where(busy, 0.0, df["time_s"]),
        }).groupby(by, sort=True).sum()
        start, end = self.window(window)
        grouped["avg_power_mw"] = grouped["energy_mj"] / (end - start) if end > start else np.nan
        return grouped

    @df_residency.used_events
    def summary(self, model: EnergyModel | str | None = None,
                window: tuple[float, float] | None = None, **options) -> dict:
        """The JSON figures: the model used, the window, energy per CPU and
        cluster and the total (mJ), and the average power (mW)."""
        if model is None:
            raise UserError("energy: a power model is needed: --model MODEL.json "
                            "(or the target's, lisa_ext.energy_model.model_from_target)")
        if isinstance(model, str):
            model = resolve_model(model)
        start, end = self.window(window)
        cpus = self.df_energy(model, by="cpu", window=window)
        clusters = self.df_energy(model, by="cluster", window=window)
        total = float(cpus["energy_mj"].sum())
        return {
            "model": model.to_dict(),
            "model_source": model.source,
            "window_s": [start, end],
            "cpus": {str(k): float(v) for k, v in cpus["energy_mj"].items()},
            "clusters": {str(k): float(v) for k, v in clusters["energy_mj"].items()},
            "total_energy_mj": total,
            "avg_power_mw": total / (end - start) if end > start else None,
        }

    @df_residency.used_events
    def summary_tables(self, model: EnergyModel | str | None = None,
                       window: tuple[float, float] | None = None, **options) -> list[tuple[str, pd.DataFrame]]:
        """Energy per CPU and per cluster, as the command prints them."""
        figures = self.summary(model, window)
        model = resolve_model(model) if isinstance(model, str) else model
        return [("energy per CPU", self.df_energy(model, by="cpu", window=window)),
                ("energy per cluster", self.df_energy(model, by="cluster", window=window)),
                ("total", pd.DataFrame({"energy_mj": [figures["total_energy_mj"]],
                                        "avg_power_mw": [figures["avg_power_mw"]]}))]

    @df_residency.used_events
    def plot_energy(self, model: EnergyModel | str, by: str = "cpu") -> hv.Bars:
        """Energy (mJ) per CPU or cluster, busy and idle stacked."""
        df = self.df_residency_energy(model)
        kind = np.where(df["state"] == BUSY, "busy", "idle")
        parts = df.assign(kind=kind).groupby([by, "kind"])["energy_mj"].sum().reset_index()
        return hv.Bars(parts, kdims=[by, "kind"], vdims="energy_mj").opts(
            stacked=True, title="energy (mJ)", ylabel="mJ")


def _priced(df: pd.DataFrame, model: EnergyModel) -> pd.DataFrame:
    """``df`` (``cpu``, ``freq_khz``, ``state``, ``time_s``) with ``cluster``,
    ``power_mw`` and ``energy_mj`` from ``model``."""
    cluster = [model.cluster_of(int(c)) for c in df["cpu"]]
    power = np.empty(len(df))
    for i, (name, f, s) in enumerate(zip(cluster, df["freq_khz"].to_numpy(), df["state"].to_numpy())):
        table = model.clusters[name]
        if s == BUSY:
            if f not in table.opp_mw:
                raise UserError(f"{model.source}: cluster {name!r} has no power for frequency {f} kHz "
                                f"(opp_mw has {sorted(table.opp_mw)})")
            power[i] = table.opp_mw[f]
        else:
            if s not in table.idle_mw:
                raise UserError(f"{model.source}: cluster {name!r} has no power for idle state {s} "
                                f"(idle_mw has {sorted(table.idle_mw)})")
            power[i] = table.idle_mw[s]
    return df.assign(cluster=cluster, power_mw=power, energy_mj=df["time_s"].to_numpy() * power)


def _cpu_segments(ft: np.ndarray, fv: np.ndarray, it: np.ndarray, iv: np.ndarray,
                  start: float, end: float) -> pd.DataFrame:
    """One CPU's (freq, state) in force on each segment of [start, end] between its
    events: ``start``, ``freq_khz`` (0 when it has no ``cpu_frequency`` event),
    ``state``, ``time_s``."""
    initial_f = fv[0] if len(fv) else 0
    initial_s = (BUSY if iv[0] != BUSY else 0) if len(iv) else BUSY
    bounds = np.unique(np.concatenate([[start, end], ft, it]))
    bounds = bounds[(bounds >= start) & (bounds <= end)]
    seg_start, seg_len = bounds[:-1], np.diff(bounds)
    # Value in force on [t, next): the last event at or before t (simultaneous
    # events: the last in trace order wins).
    fi = np.searchsorted(ft, seg_start, side="right") - 1
    ii = np.searchsorted(it, seg_start, side="right") - 1
    freq = np.where(fi >= 0, fv[np.maximum(fi, 0)] if len(fv) else 0, initial_f)
    state = np.where(ii >= 0, iv[np.maximum(ii, 0)] if len(iv) else BUSY, initial_s)
    return pd.DataFrame({"start": seg_start, "freq_khz": freq, "state": state, "time_s": seg_len})


def _cpu_residency(cpu: int, ft: np.ndarray, fv: np.ndarray, it: np.ndarray, iv: np.ndarray,
                   start: float, end: float) -> pd.DataFrame:
    """Time per (freq, state) of one CPU in [start, end]; freq 0 when it has no
    ``cpu_frequency`` event (filled per cluster by the caller)."""
    seg = _cpu_segments(ft, fv, it, iv, start, end)
    out = seg.groupby(["freq_khz", "state"], sort=True)["time_s"].sum().reset_index()
    out.insert(0, "cpu", cpu)
    return out
