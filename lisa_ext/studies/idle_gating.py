"""Study 004, idle gating (``notebooks/idle-gating.{yml,ipynb}``): the RFC's four tables and its mechanism.

The RFC ("IDLE gating in presence of latency-sensitive tasks", Parth Shah, 2020) keeps the CPUs of
latency-sensitive tasks out of every idle state (kernel/sched/idle.c polls instead) and compares
schbench wake-up latency percentiles and pgbench latency / transactions, plus average power, for
the baseline, ``cpupower idle-set -D 10`` and the patch. Our port marks tasks by comm prefix
(kernels/patches/0004-...; :mod:`lisa_ext.analysis.idle_gating`).

* :func:`rfc_tables`: our numbers in the RFC's four table shapes (mean over iterations);
* :func:`df_energy`: the meter beside the trace estimate (``trace.ana.energy``);
* :func:`df_idle_residency` / :func:`plot_idle_residency`: the mechanism, the share of idle time
  per state after marked tasks and after the others, per variant.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from lisa_ext.errors import UserError
from lisa_ext.report.build import campaign_metrics
from lisa_ext.report.figures import FigureSpec, render_figures, residency_figure
from lisa_ext.rfc_numbers import load_rfc_numbers
from lisa_ext.studies.energy import df_run_power
from lisa_ext.studies.rfc import rows_from_metrics, timing_text, variant_table
from lisa_ext.studies.runs import idle_state_names, per_run_analysis

__all__ = ["ENERGY_ROW", "ROW_METRICS", "STUDY", "df_energy", "df_idle_residency", "plot_idle_residency",
           "rfc_tables", "save_idle_residency_figure", "what_is_real", "why_on_this_board"]

STUDY = "idle-gating"
#: The RFC's energy row: average power in watts (its label says energy).
ENERGY_ROW = "Avg. Energy (Watts)"
#: RFC row label -> our metric, per workload kind (the table ids start with the kind)
ROW_METRICS: dict[str, dict[str, str]] = {
    "schbench": {"50": "wakeup_lat_p50", "90": "wakeup_lat_p90", "99": "wakeup_lat_p99",
                 "max": "wakeup_lat_max", ENERGY_ROW: "power_mw"},
    "pgbench": {"latency avg. (ms)": "latency_avg", "latency stddev": "latency_stddev",
                "trans. completed": "transactions", ENERGY_ROW: "power_mw"},
}


def rfc_tables(campaign_dir: str | os.PathLike) -> dict[str, pd.DataFrame]:
    """{table id: our numbers in that RFC table's shape}: the workload named like the table id,
    each variant in the column the RFC numbers file maps to it, arithmetic mean over iterations,
    the energy row as the meter's average power in W; the "vs Baseline (%)" columns from our
    own numbers; NaN where no run gives a cell."""
    metrics = campaign_metrics(Path(campaign_dir), traces=False)
    tables = {}
    for table in load_rfc_numbers(STUDY).tables:
        values = rows_from_metrics(metrics, ROW_METRICS[table.id.split("-")[0]], workload=table.id)
        if ENERGY_ROW in values.index:
            values.loc[ENERGY_ROW] = values.loc[ENERGY_ROW] / 1000.0
        tables[table.id] = variant_table(STUDY, table.id, values)
    return tables


def df_energy(campaign_dir: str | os.PathLike) -> pd.DataFrame:
    """Mean average power per workload and variant (mW): the meter's (the RFC's energy row) and
    the trace estimate beside it (:func:`lisa_ext.studies.energy.df_run_power`), with their
    difference in %."""
    power = df_run_power(campaign_dir)
    if power.empty:
        return power
    mean = power.groupby(["workload", "variant"], sort=False)[["meter_power_mw", "trace_power_mw"]].mean()
    mean["estimate_vs_meter_pct"] = 100 * (mean["trace_power_mw"] / mean["meter_power_mw"] - 1)
    return mean


def df_idle_residency(campaign_dir: str | os.PathLike, comm: str | None = None) -> pd.DataFrame:
    """Share of idle time per idle state, after marked tasks and after the others.

    ``comm``: the marked tasks' comm prefixes, comma-separated (default: the analysis's
    :data:`~lisa_ext.analysis.idle_gating.DEFAULT_PREFIXES`, those the gating kernel marks).

    One row per (``variant``, ``workload``, ``after`` = "marked" | "other", ``state``) with
    ``state_name`` (the kernel's name of the state, as the runs recorded it, else ``state N``),
    ``periods`` (idle periods, summed over iterations) and ``pct`` (% of that group's idle time,
    over all iterations): from :meth:`IdleGatingAnalysis.df_state_residency` of every run.
    """
    df = per_run_analysis(campaign_dir, "idle_gating", "df_state_residency", comm=comm)
    df["after"] = np.where(df["marked"], "marked", "other")
    grouped = df.groupby(["variant", "workload", "after", "state"], sort=False).agg(
        periods=("periods", "sum"), time_s=("time_s", "sum")).reset_index()
    totals = grouped.groupby(["variant", "workload", "after"])["time_s"].transform("sum")
    grouped["pct"] = 100.0 * grouped["time_s"] / totals.where(totals > 0)
    names = idle_state_names(campaign_dir)
    grouped.insert(4, "state_name", [names.get(int(s), f"state {s}") for s in grouped["state"]])
    return grouped


def plot_idle_residency(residency: pd.DataFrame, workload: str) -> Any:
    """Two stacked-bar panels side by side (after marked tasks, after the others): % of idle
    time per state (by its kernel name) and variant, for one workload of :func:`df_idle_residency`."""
    df = residency[residency["workload"] == workload].copy()
    if df.empty:
        raise UserError(f"no idle periods for workload {workload!r}; workloads: "
                        f"{', '.join(sorted(residency['workload'].unique()))}")
    df["state"] = df["state_name"]
    panels = [residency_figure(df[df["after"] == after][["variant", "state", "pct"]],
                               f"idle after {label}", "idle state")
              for after, label in (("marked", "marked tasks"), ("other", "other tasks"))]
    # side by side, one legend, one title above both: stacked, each title sat on the x labels of the
    # panel above; the first panel's legend sat on the second
    left = panels[0].opts(show_legend=False, backend="matplotlib")
    return (left + panels[1]).cols(2).opts(title=workload, sublabel_format="", backend="matplotlib")


def save_idle_residency_figure(residency: pd.DataFrame, workload: str, out_dir: str | os.PathLike) -> Path:
    """:func:`plot_idle_residency` written as ``out_dir/idle-residency-<workload>.svg``, from the
    report's figure cache when the same frame was drawn before (a re-render draws nothing)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    spec = FigureSpec(f"idle-residency-{workload}", plot_idle_residency,
                      (residency[residency["workload"] == workload].reset_index(drop=True), workload))
    return render_figures([spec], out, formats=("svg",))[0]


_ENERGY = (
    "The energy row is the kernel's real idle and OPP residencies priced by the RK3399 power model, where WFI "
    "costs 4 mW and the deep states 0 mW per A53 core: trading deep states for WFI can add at most 16 mW on four "
    "CPUs, a few % of the busy power, so that row moves little and its sign can follow noise in the busy time.")
_NOISE_AND_ENERGY = (
    "Wake-up times under TCG are milliseconds and the host's two cores are shared with other guests, so "
    "run-to-run differences of tens of % are noise here. " + _ENERGY)


def why_on_this_board(campaign_dir: str | os.PathLike) -> str:
    """Why the latency rows can or cannot show the RFC's gain on the campaign's platform (markdown)."""
    return timing_text(
        campaign_dir,
        decisions=(
            "**Why, on this board:** with `decisions` timing the idle states of the board are all HLT "
            "(`lisa_emu_cpuidle`): the table's exit latencies steer the governor but are not paid, so skipping "
            "a 370–900 µs exit, the RFC's whole latency gain, does not exist here. What can differ is QEMU's: a "
            "gated vCPU spins in the poll loop and runs a woken task without QEMU having to wake a halted vCPU "
            "thread, while `idle-set -D 10` still halts (WFI is a HLT too). " + _NOISE_AND_ENERGY),
        faithful=(
            "**Why, on this board:** with `faithful` timing a wake-up from an emulated state is held for that "
            "state's exit latency from the RK3399 table before the woken task runs, so skipping a 370–900 µs "
            "exit, the RFC's latency gain, is paid here too, within the calibration's error (RK3399's "
            "sub-millisecond exit latencies are the least exact: docs/vboard.md#calibration). " + _NOISE_AND_ENERGY),
        faithful_virtual=(
            "**Why, on this board:** with `faithful` timing on the board's own clock, a wake-up from an emulated "
            "state is held for that state's exit latency from the RK3399 table, to the instruction, in the "
            "board's time, whatever the host's load, so skipping a 370–900 µs exit, the RFC's latency gain, is "
            "paid here as on silicon. A CPU that polls sees its wake-up at most 10 µs late (the emulator's spin "
            "quantum; on silicon ~0.1 µs: docs/vboard.md, \"Why the board's QEMU is patched\"). " + _ENERGY),
        board="**On this board** the idle states' exit latencies are the silicon's: the latency rows measure "
              "what skipping them gains.",
    )


def what_is_real(campaign_dir: str | os.PathLike) -> str:
    """The page's "what is real" section for the platform the campaign ran on (markdown)."""
    emulated = timing_text(
        campaign_dir,
        decisions=(
            "- **Emulated:** the idle states (every state is a HLT; exit latencies and target residencies are the "
            "RK3399 device tree's numbers, given to the governor, not paid on wake-up) and the OPPs; the energy "
            "meter (the kernel's residencies priced by the RK3399 power model, WFI 4 mW, deep states 0 mW; the "
            "gating's poll loop is priced as WFI).\n"
            "- **Not real:** wake-up latency in µs (QEMU TCG, about 30× slower than hardware, with vCPUs sharing "
            "two host cores with other guests), and power of silicon. The RFC's latency gain comes from skipping "
            "deep-state exit latency, which the board does not pay with `decisions` timing; `--board-timing "
            "faithful` pays it, and a real board (a Linux board over SSH: `lisa-ext study run idle-gating "
            "--target target-configs/<board>.yml`) shows it on silicon."),
        faithful=(
            "- **Emulated:** the idle states (a HLT held, on wake-up, for the exit latency of the RK3399 device "
            "tree's state; target residencies given to the governor) and the OPPs (each paid at its speed); the "
            "energy meter (the kernel's residencies priced by the RK3399 power model, WFI 4 mW, deep states 0 mW; "
            "the gating's poll loop is priced as WFI).\n"
            "- **Not real:** wake-up latency in µs beyond the exit latencies paid (QEMU TCG, about 30× slower than "
            "hardware, its timer interrupts late by tenths of a millisecond, with vCPUs sharing two host cores "
            "with other guests), and power of silicon."),
        faithful_virtual=(
            "- **Emulated:** the idle states (a HLT held, on wake-up, for the exit latency of the RK3399 device "
            "tree's state, exact on the board's own clock; target residencies given to the governor) and the OPPs "
            "(each paid at its speed); the energy meter (the kernel's residencies priced by the RK3399 power "
            "model, WFI 4 mW, deep states 0 mW; the gating's poll loop is priced as WFI).\n"
            "- **Not real:** the CPUs' pace (one instruction per ns of the board's clock, about an A53's), "
            "caches and memory, a polling CPU's reaction (up to 10 µs, ~0.1 µs on silicon), and power of "
            "silicon."),
        board="- **Real too:** the idle states' exit latencies and the wake-up latencies in µs.",
    )
    return ("## What is real on the board and what is not\n\n"
            "- **Real:** the kernel's scheduling and idle decisions: the menu governor choosing among the RK3399 "
            "states, `idle-set -D 10` disabling states through sysfs, our gating patch keeping marked tasks' CPUs "
            "polling (the mechanism table), the `cpu_idle` / `sched_*` events, schbench's and pgbench's own "
            "measurements of what they saw, PostgreSQL itself.\n" + emulated + "\n"
            "- **Different from the RFC:** tasks are marked by comm prefix instead of latency_nice -20, and a CPU "
            "gates for the last marked task it went idle from (the RFC counts every queued marked task).")
