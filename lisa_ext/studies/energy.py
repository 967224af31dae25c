"""The energy rows of the studies: the run's meter and, beside it, the trace's estimate.

RFC 002 reports gmean power (mW) per governor, RFC 004 average power (W) per
variant. A campaign with ``energy:`` stores each run's meter reading
(``meta["energy"]``, :mod:`lisa_ext.campaign.meters`): the average power over the
workload window, and the power model the target declared. The estimate beside it
is ``trace.ana.energy`` (:mod:`lisa_ext.analysis.energy`) on the run's trace with
that same model: the kernel's OPP and idle-state residencies from
``cpu_frequency`` + ``cpu_idle``, priced per state. On the virtual board both follow
one model through independent paths (the emulation modules' counters vs the
trace), so they agree to the extent the trace's window matches the meter's (the
trace also covers a little set-up idle time before and after the workload).
"""

from __future__ import annotations

import os
from pathlib import Path

import pandas as pd

from lisa_ext.campaign.store import Run, read_campaign
from lisa_ext.energy_model import model_from_dict
from lisa_ext.report.cache import cached_frame
from lisa_ext.trace import load_trace

__all__ = ["ENERGY_COLUMNS", "df_run_power"]

#: Columns of :func:`df_run_power`.
ENERGY_COLUMNS = ("variant", "workload", "iteration", "meter_power_mw", "trace_power_mw")


def _trace_power_mw(run: Run, model: dict) -> float:
    def compute() -> pd.DataFrame:
        ana = load_trace(run.trace).ana.energy
        figures = ana.summary(model=model_from_dict(model, f"{run.label} meta.json energy.model"))
        return pd.DataFrame({"avg_power_mw": [float(figures["avg_power_mw"] or float("nan"))]})

    return float(cached_frame(run.trace, ("energy", "avg_power_mw", model), compute)["avg_power_mw"].iloc[0])


def df_run_power(campaign_dir: str | os.PathLike) -> pd.DataFrame:
    """Average power per successful run (:data:`ENERGY_COLUMNS`): the meter's, and the
    trace estimate's with the model the meter recorded (NaN without a trace or a
    model). Empty when the campaign ran without a meter."""
    rows = []
    for run in read_campaign(Path(campaign_dir)).ok_runs:
        energy = run.meta.get("energy")
        if not isinstance(energy, dict) or energy.get("avg_power_mw") is None:
            continue
        model = energy.get("model")
        trace_mw = _trace_power_mw(run, model) if run.trace is not None and model else float("nan")
        rows.append((run.variant, run.workload, run.iteration, float(energy["avg_power_mw"]), trace_mw))
    return pd.DataFrame(rows, columns=list(ENERGY_COLUMNS))
