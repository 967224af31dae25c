"""The energy rows of the studies: the run's meter and, beside it, the trace's estimate.

RFC 002 reports gmean power (mW) per governor, RFC 004 average power (W) per
variant. A campaign with ``energy:`` stores each run's meter reading
(``meta["energy"]``, :mod:`lisa_ext.campaign.meters`): the average power over the
workload window, and the power model the target declared. The estimate beside it
is ``trace.ana.energy`` (:mod:`lisa_ext.analysis.energy`) on the run's trace with
that same model: the kernel's OPP and idle-state residencies from
``cpu_frequency`` + ``cpu_idle``, priced per state, over the meter's own window: the
runner marks the two readings in the trace (``meta["energy"]["trace_markers"]``,
:data:`lisa_ext.campaign.meters.METER_MARKERS`). On the virtual board both follow one
model through independent paths (the emulation modules' counters vs the trace), so
over the same window they agree. Runs recorded before the markers existed are priced
over the whole trace, which also covers trace-cmd starting and stopping around the
workload (seconds of a quieter board: on short runs the estimate then falls well
below the meter).
"""

from __future__ import annotations

import os
from pathlib import Path

import pandas as pd

from lisa_ext.campaign.store.reader import Run, read_campaign
from lisa_ext.energy_model import model_from_dict
from lisa_ext.report.cache import cached_frame
from lisa_ext.trace import load_trace

__all__ = ["ENERGY_COLUMNS", "df_run_power", "marker_window"]

#: Columns of :func:`df_run_power`.
ENERGY_COLUMNS = ("variant", "workload", "iteration", "meter_power_mw", "trace_power_mw")


def marker_window(trace, markers: list[str] | tuple[str, ...]) -> tuple[float, float] | None:
    """The times (s) of the first ``markers[0]`` and the last ``markers[1]`` trace marker
    (``print`` events) of a loaded trace, or None when either is missing."""
    try:
        prints = trace.df_event("print")
    except Exception:  # no print event in the trace: LISA's MissingTraceEventError
        return None
    text = prints["buf"].map(lambda b: (b.decode(errors="replace") if isinstance(b, bytes) else str(b)).strip())
    start, end = prints.index[text == markers[0]], prints.index[text == markers[1]]
    if not len(start) or not len(end) or end[-1] <= start[0]:
        return None
    return float(start[0]), float(end[-1])


def _trace_power_mw(run: Run, model: dict, markers: list[str] | None) -> float:
    def compute() -> pd.DataFrame:
        trace = load_trace(run.trace)
        window = marker_window(trace, markers) if markers else None
        figures = trace.ana.energy.summary(model=model_from_dict(model, f"{run.meta.path} energy.model"),
                                           window=window)
        return pd.DataFrame({"avg_power_mw": [float(figures["avg_power_mw"] or float("nan"))]})

    key = ("energy", "avg_power_mw", model, markers or [])
    return float(cached_frame(run.trace, key, compute)["avg_power_mw"].iloc[0])


def df_run_power(campaign_dir: str | os.PathLike) -> pd.DataFrame:
    """Average power per successful run (:data:`ENERGY_COLUMNS`): the meter's, and the
    trace estimate's with the model the meter recorded, over the meter's window when
    the run marked it (NaN without a trace or a model). Empty when the campaign ran
    without a meter."""
    rows = []
    for run in read_campaign(Path(campaign_dir)).ok_runs:
        energy = run.meta.get("energy")
        if not isinstance(energy, dict) or energy.get("avg_power_mw") is None:
            continue
        model = energy.get("model")
        trace_mw = (_trace_power_mw(run, model, energy.get("trace_markers"))
                    if run.trace is not None and model else float("nan"))
        rows.append((run.variant, run.workload, run.iteration, float(energy["avg_power_mw"]), trace_mw))
    return pd.DataFrame(rows, columns=list(ENERGY_COLUMNS))
