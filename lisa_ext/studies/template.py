"""Your own study: what ``lisa-ext study new NAME`` writes, and the page its notebook shows.

:func:`write_study` writes ``notebooks/NAME.yml`` (a campaign spec: variants from a runtime
knob's values, or from kernel variant specs it writes under ``kernels/NAME/``; workloads; a
``smoke:`` size), and ``notebooks/NAME.ipynb``, a thin notebook over :class:`StudyPage`:
the study's status, its cover-letter table (:mod:`lisa_ext.report.cover`), a mechanism figure
chosen by name (:data:`MECHANISMS`: wake-up latency, CPU time, migrations and the frequency after a
wake-up of the workload's own tasks, one task selector for all: :mod:`lisa_ext.analysis.tasks`; the
CPUs' idle states and busy time) and the trace explorer. Before any run the page shows the
committed sample campaign (:data:`SAMPLE`), saying so in its first lines; ``lisa-ext study new``
renders it at once.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np
import pandas as pd

from lisa_ext.campaign.spec import load_spec
from lisa_ext.campaign.store.metrics import METRIC_DTYPES, METRICS_COLUMNS
from lisa_ext.campaign.store.reader import has_runs, read_campaign
from lisa_ext.errors import SpecError, UserError
from lisa_ext.report.build import campaign_metrics
from lisa_ext.report.cover import CoverLetterTable
from lisa_ext.report.escape import code_span
from lisa_ext.report.figures import (curves_figure, export, grouped_bars_figure, latency_cdf_figure,
                                     residency_figure)
from lisa_ext.report.readable import knobs_table, readable_table
from lisa_ext.stats.cover import cover_table
from lisa_ext.studies.runs import idle_state_names, per_run_analysis
from lisa_ext.workbench import output_dir, workbench_path

__all__ = ["CONCLUSION_PLACEHOLDER", "CONCLUSION_TAG", "HEADLINE_METRICS", "MECHANISMS", "SAMPLE", "SAMPLE_TASKS",
           "StudyPage", "TASK_METRICS", "WORKLOAD_TEMPLATES", "notebook", "spec_text", "write_study"]

#: the committed campaign a new study's page shows before its own first run: a smoke run of
#: notebooks/sugov-rate-limit.yml on the board (rt-app, every event of TRACE_EVENTS), so that each
#: mechanism figure has what it needs
SAMPLE = "data/samples/sugov-rate-limit-board"
#: the tasks the page follows on the sample (its settings' ``TASKS`` name the study's own)
SAMPLE_TASKS = "comm:^bursty-"
#: the spec's trace events: scheduler, idle and frequency, and what the task selectors need
TRACE_EVENTS = ("sched:sched_switch", "sched:sched_waking", "sched:sched_wakeup",
                "sched:sched_process_fork", "sched:sched_process_exec", "task:task_newtask",
                "power:cpu_idle", "power:cpu_frequency")
#: workload kind -> (full-size options, smoke options), for the spec a new study starts from
WORKLOAD_TEMPLATES: dict[str, tuple[dict, dict]] = {
    "schbench": ({"runtime-s": 10, "message-threads": 2, "threads": 2}, {"runtime-s": 3}),
    "hackbench": ({"groups": 2, "loops": 500, "mode": "thread"}, {"loops": 100}),
    "rtapp": ({"duration-s": 10, "tasks": {"bursty": {"duty-cycle-pct": 25, "period-ms": 16}}},
              {"duration-s": 3}),
    "fio": ({"options": {"rw": "randread", "bs": "4k", "ioengine": "psync", "direct": 1, "size": "32M",
                         "runtime": 10, "time_based": 1}},
            {"options": {"rw": "randread", "bs": "4k", "ioengine": "psync", "direct": 1, "size": "32M",
                         "runtime": 3, "time_based": 1}}),
}
#: workload kind -> {metric: label}: what a cover letter quotes of it
HEADLINE_METRICS: dict[str, dict[str, str]] = {
    "schbench": {"wakeup_lat_p99": "schbench p99 wake-up latency", "request_lat_p99": "schbench p99 request latency",
                 "rps_avg": "schbench requests/s"},
    "hackbench": {"time": "hackbench time"},
    "fio": {"read_iops": "fio read IOPS"},
    "pgbench": {"tps": "pgbench transactions/s", "latency_avg": "pgbench mean latency"},
    # the task of WORKLOAD_TEMPLATES' rt-app workload, whose name prefixes its metrics
    "rtapp": {"bursty_perf_index_mean": "rt-app bursty performance index",
              "bursty_missed_pct": "rt-app bursty late activations",
              "bursty_wu_lat_p99": "rt-app bursty p99 wake-up latency"},
}
#: metrics a page computes per traced run from its selected tasks (``TASKS``), when its settings name
#: them: metric -> (label, unit, lower is better)
TASK_METRICS: dict[str, tuple[str, str, bool]] = {
    "tasks_freq_after_wakeup_10ms": ("mean frequency in the 10 ms after a wake-up", "MHz", False),
    "tasks_wakeup_lat_p99": ("p99 wake-up latency of the tasks", "us", True),
}
#: the program each workload kind executes, for the ``exec:`` task selector
_PROGRAMS = {"schbench": "schbench", "hackbench": "hackbench", "rtapp": "rt-app", "fio": "fio",
             "ebizzy": "ebizzy", "cyclictest": "cyclictest", "pgbench": "pgbench"}
#: the mechanism figures a page offers by name (:meth:`StudyPage.mechanism_figure`), each over the
#: tasks the page's selector picks, from ``sched_switch`` and the wake-up events alone
MECHANISMS = {
    "wakeup-latency": "how long the tasks waited to run after each wake-up (the run-queue wait), as a CDF per variant",
    "cpu-time": "where the tasks ran: the share of their runtime on each CPU, per variant",
    "migrations": "how often the tasks moved: the % of their switch-ins on another CPU than their last, per variant "
                  "and workload",
    "frequency-after-wakeup": "the frequency of the CPU a task woke on, in the 30 ms after each of its wake-ups "
                              "from idle, the mean per variant (needs power:cpu_frequency)",
    "idle-states": "the share of the CPUs' idle time in each idle state, per variant and workload (all CPUs, "
                   "whoever woke them; needs power:cpu_idle)",
    "cpu-busy": "how busy each CPU was: the % of the traced time it ran any task, per variant (the mean over "
                "workloads and traced runs)",
}
_NAME = re.compile(r"^[a-z][a-z0-9-]{0,40}$")
#: the tag of the conclusion cell, and its text until the author writes it (the page check
#: fails a page still showing it: tests/page_check.js)
CONCLUSION_TAG = "conclusion"
CONCLUSION_PLACEHOLDER = ("TODO conclusion: in two or three sentences, the answer to the question above: "
                          "which variant, by how much and how sure (the cover-letter table), what the "
                          "mechanism figure showed, and what is left to run.")


def _variant_name(value: str, knob: str = "") -> str:
    """A variant's name from its knob value: lower-case letters, digits and dashes, at most 64
    (a directory name; the spec quotes it, so ``true`` stays a name). A number is named after
    the knob's file too (``rate_limit_us`` 0: ``rate-limit-us-0``): ``0`` explains nothing on a page."""
    if knob and re.fullmatch(r"[-+]?[0-9][0-9.,_]*", value.strip()):
        value = f"{knob.rstrip('/').rsplit('/', 1)[-1]}-{value.strip()}"
    return re.sub(r"[^a-z0-9]+", "-", value.lower()).strip("-")[:64].strip("-") or "variant"


def spec_text(name: str, *, knob: str | None, values: Sequence[str], kernels: Sequence[str],
              workloads: Sequence[str], target: str) -> str:
    """The campaign spec of a new study (YAML, commented for the one who edits it next)."""
    lines = [f"# {name}: a study written by `lisa-ext study new {name}`; every key: docs/campaigns.md,",
             "# the walk-through: docs/your-own-study.md. Check it offline with",
             f"# `lisa-ext campaign check notebooks/{name}.yml`.",
             f"name: {name}",
             f'description: "{name}: TODO one line, what the change should improve"',
             f"target: {target}",
             "iterations: 5",
             "# interleave the variants (A B A B ...) so that slow drift falls on both",
             "order: interleave" if not kernels else "# a kernel switch is a reboot: each variant's runs together\norder: group-by-variant",
             "trace:",
             "  # the scheduler's and the idle/frequency governors' decisions, and what the task",
             "  # selectors (exec:NAME, tree:PID) need to find the workload's own tasks",
             "  events:"]
    lines += [f"    - {event}" for event in TRACE_EVENTS]
    lines += ["  buffer-size-kb: 16384",
              "  # traces are large: the first iteration of each cell is enough for the mechanism",
              "  iterations: [0]",
              "variants:"]
    if kernels:
        for kernel in kernels:
            lines += [f"  - name: {kernel}", f"    kernel: ../kernels/{name}/{kernel}.yml"]
    else:
        for value in values:
            # quoted (JSON strings are YAML): a value or name like 100, true or "a: b" stays a string
            lines += [f"  - name: {json.dumps(_variant_name(value, knob or ''))}", "    knobs:",
                      f"      {json.dumps(knob)}: {json.dumps(value)}"]
    lines.append("workloads:")
    smoke = []
    for kind in workloads:
        full, small = WORKLOAD_TEMPLATES[kind]
        body = json.dumps(full)[1:-1]
        lines += [f"  - {{name: {kind}, kind: {kind}, {body}}}"]
        smoke.append(f"    {kind}: {json.dumps(small)}")
    lines += ["# --smoke: the shortest runs that fill every cell of the page (two iterations: an sd)",
              "smoke:", "  iterations: 2", "  workloads:", *smoke]
    return "\n".join(lines) + "\n"


def _kernel_text(name: str, kernel: str, first: bool) -> str:
    patches = ("patches: []" if first else
               "patches:\n  # TODO: your patch series, in order (paths relative to this file)\n"
               "  # - ../patches/0001-my-change.patch\n  []")
    return (f"# {name}: the {'baseline' if first else 'patched'} kernel of the study (docs/kernels.md). "
            "Variants differing only\n# by cmdline, knobs or modules share one build: lisa-ext kernel status "
            f"notebooks/{name}.yml\nname: {kernel}\ndescription: TODO\nbase: debian\n{patches}\n"
            "configs:\n  - ../configs/vboard.config\nmodules:\n  - name: lisa_emu_cpuidle\n"
            "    params: {table: rk3399}\n  - name: lisa_emu_cpufreq\n    params: {opps: rk3399-little}\n")


def _cell(kind: str, source: str, tags: Sequence[str] = ()) -> dict:
    cell: dict[str, Any] = {"cell_type": kind, "metadata": {"tags": list(tags)} if tags else {},
                            "source": source}
    if kind == "code":
        cell.update(execution_count=None, outputs=[])
    return cell


def notebook(name: str, *, baseline: str, metrics: Mapping[str, str], tasks: str | None,
             variants: Sequence[str], workloads: Sequence[str]) -> dict:
    """The notebook of a new study (nbformat 4 as a plain dict): narrative to fill in, and calls."""
    settings = ("# The study's settings: the variant the others are compared with, the metrics the cover\n"
                "# letter quotes (metric: label; `lisa-ext report data/NAME` lists them all) and the tasks\n"
                "# whose wake-ups the mechanism figure shows (comm:REGEX, pid:N, tgid:N, tree:N, exec:NAME).\n"
                f"BASELINE = {baseline!r}\nMETRICS = {json.dumps(dict(metrics), indent=4)}\nTASKS = {tasks!r}")
    cells = [
        _cell("markdown", f"# {name}: TODO the question this study answers\n\n"
                          "**The change:** TODO what it does, in the kernel's terms (function, knob, patch).\n\n"
                          f"**Here:** variants {', '.join(f'`{v}`' for v in variants)}; workloads "
                          f"{', '.join(f'`{w}`' for w in workloads)}; spec `notebooks/{name}.yml`."),
        _cell("code", f'campaign_dir = "data/{name}"\nreport_dir = "out/{name}-report"\nsmoke = False',
              tags=["parameters"]),
        _cell("code", settings + "\n\nfrom IPython.display import Markdown, display\n\n"
                                 "from lisa_ext import study\nfrom lisa_ext.studies import template\n\n"
                                 "page = template.StudyPage(campaign_dir, smoke=smoke, baseline=BASELINE, "
                                 "metrics=METRICS, tasks=TASKS)\ndisplay(Markdown(page.banner()))"),
        _cell("markdown", "## What ran\n\nRuns per variant and workload and the kernel each ran, then the "
                          "knobs each variant's runs read back after writing them (path -> value)."),
        _cell("code", "page.status()"),
        _cell("code", "page.knobs()"),
        _cell("markdown", "## The cover-letter table\n\nEach variant against the baseline: mean ± sd, the "
                          "% change with its confidence interval, the test and n. Paste `.markdown()` or "
                          "`.text()` (mmtests style) into the letter."),
        _cell("code", "table = page.cover_table()\ntable"),
        _cell("markdown", "## The mechanism: wake-up latency of the workload's own tasks\n\n"
                          "TODO: say what the change does to the tasks and what the figure should show. The "
                          "tasks are the ones `TASKS` selects (`lisa_ext.analysis.tasks`; rt-app's threads are "
                          "`<task>-<index>`: `comm:^bursty-`), all traced runs pooled per variant."),
        _cell("code", "# the mechanism figure by name: " + ", ".join(f'"{m}"' for m in MECHANISMS)
              + " (template.MECHANISMS)\nstudy.show_figure(page.mechanism_figure(\"wakeup-latency\", report_dir))"),
        _cell("markdown", "## What is real on the platform and what is not\n\nTODO (the virtual board: "
                          "the kernel's decisions are real, its timings are QEMU's; docs/vboard.md)."),
        _cell("markdown", f"## Conclusion\n\n{CONCLUSION_PLACEHOLDER}", tags=[CONCLUSION_TAG]),
        _cell("markdown", "## Explore a run\n\nThe first traced run as linked, zoomable plots: per-CPU "
                          "frequency, idle states, the running task and wake-ups."),
        _cell("code", "study.explore_run(page.campaign, report_dir, findings=[])"),
    ]
    return {"cells": cells, "metadata": {"kernelspec": {"display_name": "Python (lisa-ext)", "language": "python",
                                                          "name": "lisa-ext"},
                                         "language_info": {"name": "python"}},
            "nbformat": 4, "nbformat_minor": 5}


def _notebook_json(nb: dict) -> str:
    # nbformat 4.5 wants cell ids: stable ones, so a rewritten notebook diffs cleanly
    for i, cell in enumerate(nb["cells"]):
        cell["id"] = f"cell-{i}"
    return json.dumps(nb, indent=1, ensure_ascii=False) + "\n"


def write_study(name: str, *, knob: str | None = None, values: Sequence[str] = (), kernel: bool = False,
                workloads: Sequence[str] = ("schbench", "hackbench"), target: str = "../target-configs/vboard.yml",
                root: Path | None = None) -> list[Path]:
    """Write a new study's spec, kernel variant specs (``kernel``) and notebook under ``root``
    (default: the workbench); nothing is overwritten. Returns the files written."""
    if not _NAME.match(name):
        raise UserError(f"study name {name!r}: expected lower-case letters, digits and dashes, "
                        "starting with a letter (it names files and a campaign)")
    unknown = [w for w in workloads if w not in WORKLOAD_TEMPLATES]
    if unknown:
        raise UserError(f"--workload-kind {', '.join(unknown)}: a new study starts from "
                        f"{', '.join(WORKLOAD_TEMPLATES)} (add others to the spec afterwards: docs/workloads.md)")
    if kernel == bool(knob):
        raise UserError("a new study compares either kernel variants (--kernel) or values of one runtime "
                        "knob (--knob PATH --values A,B)")
    if knob and len(values) < 2:
        raise UserError("--values: at least two values of the knob, the first one the baseline")
    root = Path(root) if root is not None else workbench_path()
    spec_path = root / "notebooks" / f"{name}.yml"
    nb_path = spec_path.with_suffix(".ipynb")
    kernels = ["baseline", "patched"] if kernel else []
    kernel_paths = [root / "kernels" / name / f"{k}.yml" for k in kernels]
    existing = [p for p in (spec_path, nb_path, *kernel_paths) if p.exists()]
    if existing:
        raise UserError(f"{existing[0]} exists: study {name!r} is already there (lisa-ext study list)")
    variants = kernels or [_variant_name(v, knob or "") for v in values]
    if len(set(variants)) != len(variants):
        raise UserError(f"--values {', '.join(values)}: two values give the same variant name")
    metrics = {m: label for w in workloads for m, label in HEADLINE_METRICS.get(w, {}).items()}
    written = []
    for i, path in enumerate(kernel_paths):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(_kernel_text(name, kernels[i], i == 0), encoding="utf-8")
        written.append(path)
    spec_path.parent.mkdir(parents=True, exist_ok=True)
    spec_path.write_text(spec_text(name, knob=knob, values=values, kernels=kernels, workloads=workloads,
                                   target=target), encoding="utf-8")
    written.append(spec_path)
    try:
        load_spec(spec_path)
    except UserError as exc:
        for path in written:
            path.unlink()
        problem = f"{exc.key}: {exc.problem}" if isinstance(exc, SpecError) else str(exc)
        raise UserError(f"study {name!r} not written: the spec it would have in notebooks/{name}.yml "
                        f"does not pass campaign check: {problem}") from None
    nb_path.write_text(_notebook_json(notebook(name, baseline=variants[0], metrics=metrics,
                                               tasks=f"exec:{_PROGRAMS[workloads[0]]}", variants=variants,
                                               workloads=workloads)), encoding="utf-8")
    written.append(nb_path)
    return written


# --- the page ------------------------------------------------------------------------------------

class StudyPage:
    """What a new study's notebook shows, for its campaign or, before its first run, for the
    committed sample campaign (:data:`SAMPLE`), which :meth:`banner` then says."""

    def __init__(self, campaign_dir: str | os.PathLike, *, smoke: bool = False, baseline: str | None = None,
                 metrics: Mapping[str, str] | None = None, tasks: str | None = None):
        wanted = Path(campaign_dir)
        wanted = wanted if wanted.is_absolute() else output_dir() / wanted
        self.sample = not has_runs(wanted)
        self.campaign = workbench_path(*SAMPLE.split("/")) if self.sample else wanted
        self.wanted, self.smoke = wanted, smoke
        #: the campaign's variants, in its order
        self.variants = list(dict.fromkeys(r.variant for r in read_campaign(self.campaign).runs))
        self.baseline = baseline if baseline in self.variants and not self.sample else self.variants[0]
        self._metrics = campaign_metrics(self.campaign, traces=False)
        self.tasks = tasks if not self.sample else SAMPLE_TASKS
        asked = [m for m in (metrics or {}) if m in TASK_METRICS]
        try:
            if asked:
                self._metrics = pd.concat([self._metrics, self.df_task_metrics(asked)], ignore_index=True)
        except UserError:
            if not self.sample:  # the sample's traces need not have what your study's settings ask
                raise
        present = set(self._metrics["metric"])
        chosen = {m: label for m, label in (metrics or {}).items() if m in present}
        if not chosen:  # the sample's own, or every metric when none is known
            known = {m: label for labels in HEADLINE_METRICS.values() for m, label in labels.items()}
            known |= {m: label for m, (label, _, _) in TASK_METRICS.items()}
            chosen = {m: label for m, label in known.items() if m in present} or {m: m for m in sorted(present)}
        self.metrics = chosen

    def banner(self) -> str:
        """The page's first lines (Markdown): whose runs these are and what their numbers are good
        for; the campaign's path is quoted as code (:func:`lisa_ext.report.escape.code_span`)."""
        if self.sample:
            command = code_span(f"lisa-ext study run {self.wanted.name.removesuffix('-smoke')} --smoke")
            return (f"**Sample data:** {code_span(self.wanted)} has no runs yet, so this page shows the committed "
                    f"sample campaign {code_span(SAMPLE)} (its variants, workloads and metrics, not yours): the "
                    f"numbers check the pipeline, they are not results. Run the study: {command}, then without "
                    "`--smoke`.")
        runs = read_campaign(self.campaign).runs
        text = f"Campaign {code_span(self.campaign)}: {sum(r.ok for r in runs)} of {len(runs)} runs ok."
        if self.smoke:
            text = ("**Smoke run:** the shortest campaign that fills every cell (`--smoke`): the numbers check "
                    "the pipeline, they are not results. " + text)
        return text

    def status(self):
        """Runs per (variant, workload): finished, failed, traced; the kernel (as the target
        reported it: :func:`lisa_ext.report.readable.readable_table` escapes it)."""
        rows = []
        for run in read_campaign(self.campaign).runs:
            rows.append({"Variant": run.variant, "Workload": run.workload, "ok": run.ok, "failed": not run.ok,
                         "traced": run.trace is not None, "Kernel": run.meta.kernel_release or "–"})
        df = pd.DataFrame(rows)
        table = df.groupby(["Variant", "Workload"], sort=False).agg(
            **{"Runs ok": ("ok", "sum"), "Failed": ("failed", "sum"), "Traced": ("traced", "sum"),
               "Kernel": ("Kernel", "first")})
        return readable_table(table)

    def knobs(self):
        """The knobs each variant's runs read back after writing them: path -> value
        (:func:`lisa_ext.report.readable.knobs_table`)."""
        return knobs_table((run.variant, path, knob.get("read_back"))
                           for run in read_campaign(self.campaign).runs for path, knob in run.meta.knobs.items())

    def cover_table(self) -> CoverLetterTable:
        """The cover-letter table of :attr:`metrics`, every variant against :attr:`baseline`."""
        frame = cover_table(self._metrics, self.baseline, metric_names=list(self.metrics))
        return CoverLetterTable(frame, self.metrics)

    def df_task_metrics(self, names: Sequence[str] = tuple(TASK_METRICS)) -> pd.DataFrame:
        """The :data:`TASK_METRICS` ``names`` of the selected tasks, one row per traced run and
        metric in the tidy metrics table's columns (a run whose traces lack their events has none)."""
        per_run: list[pd.Series] = []
        run = ["variant", "workload", "iteration"]
        if "tasks_freq_after_wakeup_10ms" in names:
            # the first 10 ms of the frame the frequency-after-wakeup figure draws: one computation
            after = self._frequency_after_wakeup()
            after = after[(after["offset_s"] * 1e3).round(6) <= 10]
            per_run.append((after.groupby(run, sort=False)["freq_khz"].mean() / 1e3)
                           .rename("tasks_freq_after_wakeup_10ms"))
        if "tasks_wakeup_lat_p99" in names:
            latencies = per_run_analysis(self.campaign, "wakeup_latency", "df_wakeup_latencies", tasks=self.tasks)
            per_run.append((latencies.groupby(run, sort=False)["latency"].quantile(0.99) * 1e6)
                           .rename("tasks_wakeup_lat_p99"))
        campaign = read_campaign(self.campaign).name
        frames = [pd.DataFrame({"campaign": campaign, "variant": values.index.get_level_values("variant"),
                                "workload": values.index.get_level_values("workload"), "metric": values.name,
                                "unit": TASK_METRICS[values.name][1], "lower_is_better": TASK_METRICS[values.name][2],
                                "iteration": values.index.get_level_values("iteration"), "value": values.to_numpy()})
                  for values in per_run]
        out = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=METRICS_COLUMNS)
        out = out[out["value"].notna()]
        return out.astype(METRIC_DTYPES)[METRICS_COLUMNS]

    def df_wakeup_latency(self) -> pd.DataFrame:
        """Every wake-up latency (µs) of the selected tasks in every traced run, with ``variant``."""
        df = per_run_analysis(self.campaign, "wakeup_latency", "df_wakeup_latencies", tasks=self.tasks)
        return pd.DataFrame({"variant": df["variant"], "latency": df["latency"].to_numpy(float) * 1e6})

    def df_runs(self) -> pd.DataFrame:
        """Every stretch the selected tasks ran on a CPU in every traced run
        (:meth:`~lisa_ext.analysis.capacity_placement.CapacityPlacementAnalysis.df_runs`), with
        ``variant``, ``workload`` and ``iteration``."""
        runs = per_run_analysis(self.campaign, "capacity_placement", "df_runs", tasks=self.tasks)
        if runs.empty:
            raise UserError(f"{self.campaign}: the tasks {self.tasks} never ran in the traces")
        return runs

    def df_cpu_time(self) -> pd.DataFrame:
        """Per variant and CPU, ``pct``: the share of the selected tasks' runtime on that CPU (%)."""
        runtime = self.df_runs().groupby(["variant", "cpu"], sort=False)["duration_s"].sum()
        pct = 100 * runtime / runtime.groupby(level="variant", sort=False).transform("sum")
        return pct.rename("pct").reset_index()

    def df_migrations(self) -> pd.DataFrame:
        """Per variant and workload, the selected tasks' switch-ins after their first (``switch_ins``),
        those on another CPU than the task's last one (``moved``), and ``pct``, their share (%)."""
        keys = ["variant", "workload", "iteration", "pid"]
        runs = self.df_runs()
        runs = runs.assign(rank=runs["variant"].map(self._variant_rank()))
        runs = runs.sort_values(["rank", *keys[1:], "start"], kind="stable")
        same_task = (runs[keys] == runs[keys].shift()).all(axis=1)
        counted = pd.DataFrame({"variant": runs["variant"], "workload": runs["workload"], "switch_ins": same_task,
                                "moved": same_task & (runs["cpu"] != runs["cpu"].shift())})
        out = counted.groupby(["variant", "workload"], sort=False)[["switch_ins", "moved"]].sum().reset_index()
        out["pct"] = 100 * out["moved"] / out["switch_ins"].where(out["switch_ins"] > 0)
        return out

    def df_frequency_after_wakeup(self) -> pd.DataFrame:
        """Per variant and ``offset_ms`` after a wake-up from idle of the selected tasks, the mean
        frequency (``freq_mhz``) of the CPU it woke on over the ``wakeups`` whose CPU's frequency
        was known then (``trace.ana.wakeup_frequency.df_frequency_after_wakeup``)."""
        df = self._frequency_after_wakeup()
        df = df.assign(offset_ms=(df["offset_s"] * 1e3).round(6), freq_mhz=df["freq_khz"] / 1e3)
        out = df.groupby(["variant", "offset_ms"], sort=False).agg(
            freq_mhz=("freq_mhz", "mean"), wakeups=("freq_mhz", "count")).reset_index()
        if not out["wakeups"].any():
            raise UserError(f"{self.campaign}: no wake-up from idle of the tasks {self.tasks} with a known "
                            "frequency (the traces need power:cpu_frequency)")
        return out

    def df_idle_states(self) -> pd.DataFrame:
        """Per variant, workload and idle state (``state``, the kernel's name as the runs recorded
        it, else ``state N``): ``time_s``, the CPUs' idle time in it over every traced run, and
        ``pct``, its share of that variant's and workload's idle time (%)."""
        periods = per_run_analysis(self.campaign, "idle_miss", "df_idle_periods")
        if periods.empty:
            raise UserError(f"{self.campaign}: no idle period in the traces (they need power:cpu_idle)")
        out = periods.groupby(["variant", "workload", "state"], sort=False)["duration"].sum().rename("time_s")
        out = out.reset_index().sort_values(["state"], kind="stable")
        out = out.sort_values("variant", key=lambda v: v.map(self._variant_rank()), kind="stable")
        totals = out.groupby(["variant", "workload"], sort=False)["time_s"].transform("sum")
        out["pct"] = 100.0 * out["time_s"] / totals.where(totals > 0)
        names = idle_state_names(self.campaign)
        out["state"] = [names.get(int(s), f"state {s}") for s in out["state"]]
        return out.reset_index(drop=True)

    def df_cpu_busy(self) -> pd.DataFrame:
        """Per variant and CPU, ``pct``: the % of the traced time the CPU ran any task, the mean
        over workloads and traced runs; a run's traced time is from its first task switch to its
        trace's end."""
        runs = per_run_analysis(self.campaign, "capacity_placement", "df_runs")
        run = ["variant", "workload", "iteration"]
        span = runs.assign(end=runs["start"] + runs["duration_s"]).groupby(run, sort=False).agg(
            first=("start", "min"), last=("end", "max"))
        busy = runs.groupby([*run, "cpu"], sort=False)["duration_s"].sum().reset_index()
        busy = busy.join(span, on=run)
        busy["pct"] = 100.0 * busy["duration_s"] / (busy["last"] - busy["first"]).where(busy["last"] > busy["first"])
        out = busy.groupby(["variant", "cpu"], sort=False)["pct"].mean().reset_index()
        return out.sort_values(["cpu"], kind="stable").sort_values(
            "variant", key=lambda v: v.map(self._variant_rank()), kind="stable").reset_index(drop=True)

    def _frequency_after_wakeup(self) -> pd.DataFrame:
        """``df_frequency_after_wakeup`` of the selected tasks (30 ms in 0.5 ms steps) in every traced run."""
        return per_run_analysis(self.campaign, "wakeup_frequency", "df_frequency_after_wakeup",
                                tasks=self.tasks or "comm:.")

    def _variant_rank(self) -> dict[str, int]:
        """The campaign's order of its variants."""
        return {v: i for i, v in enumerate(self.variants)}

    def mechanism_figure(self, name: str, out_dir: str | os.PathLike) -> Path:
        """The mechanism figure ``name`` (:data:`MECHANISMS`) of the selected tasks, written as
        ``out_dir/<name>.svg``."""
        if name not in MECHANISMS:
            raise UserError(f"mechanism figure {name!r}: choose one of {', '.join(MECHANISMS)}")
        if name == "wakeup-latency":
            return self.wakeup_latency_figure(out_dir)
        if name == "cpu-time":
            frame = self.df_cpu_time().rename(columns={"cpu": "CPU", "pct": "% of runtime"})
            figure = grouped_bars_figure(frame, "CPU", "variant", "% of runtime",
                                         f"where {self.tasks} ran: share of its runtime per CPU")
        elif name == "migrations":
            frame = self.df_migrations().rename(columns={"pct": "% of switch-ins on another CPU"})
            figure = grouped_bars_figure(frame, "workload", "variant", "% of switch-ins on another CPU",
                                         f"how often {self.tasks} moved between CPUs")
        elif name == "frequency-after-wakeup":
            frame = self.df_frequency_after_wakeup().rename(
                columns={"offset_ms": "time after the wake-up (ms)", "freq_mhz": "mean frequency (MHz)"})
            figure = curves_figure(frame, "time after the wake-up (ms)", "mean frequency (MHz)", "variant",
                                   f"frequency of the CPU {self.tasks} woke on, after a wake-up from idle")
        elif name == "idle-states":
            frame = self.df_idle_states()
            if frame["workload"].nunique() > 1:
                frame = frame.assign(variant=frame["variant"] + " · " + frame["workload"])
            figure = residency_figure(frame[["variant", "state", "pct"]], "the CPUs' idle time per idle state",
                                      "idle state")
        else:
            frame = self.df_cpu_busy().rename(columns={"cpu": "CPU", "pct": "% of the traced time busy"})
            figure = grouped_bars_figure(frame, "CPU", "variant", "% of the traced time busy",
                                         "how busy each CPU was (any task)")
        return export(figure, _figure_dir(out_dir) / name, formats=("svg",))[0]

    def wakeup_latency_figure(self, out_dir: str | os.PathLike) -> Path:
        """CDF of :meth:`df_wakeup_latency` per variant, written as ``out_dir/wakeup-latency.svg``."""
        out = _figure_dir(out_dir)
        latencies = self.df_wakeup_latency()
        if latencies.empty:
            raise UserError(f"{self.campaign}: no wake-up of the tasks {self.tasks} in the traces")
        latencies = latencies[np.isfinite(latencies["latency"]) & (latencies["latency"] > 0)]
        figure = latency_cdf_figure(latencies, title=f"wake-up latency of {self.tasks}", unit="µs")
        return export(figure, out / "wakeup-latency", formats=("svg",))[0]


def _figure_dir(out_dir: str | os.PathLike) -> Path:
    """Where a page's figures go: ``out_dir`` (under the output directory when relative), made."""
    out = Path(out_dir)
    out = out if out.is_absolute() else output_dir() / out
    out.mkdir(parents=True, exist_ok=True)
    return out
