"""Run a bisection: the ends, then the steps, each a sequence of campaigns in its directory.

Layout of a bisection directory::

    bisect.json                 what is bisected (spec, ends, metric, patches' digests or the
                                range's commits, bounds), and the time spent so far
    commits/                    a git range's commits as patches (lisa_ext.bisect.git_range)
    inputs/, kernels/k<k>.yml   each step's kernel spec and its copied patches and fragments
    steps/k<k>/b<j>.yml         batch j of step k: a campaign of the step's kernel, one workload
    steps/k<k>/b<j>/            ... run by run_campaign into the store
    bisect.md, bisect.svg       the page and its figure

Nothing else records a step: its samples and its failed runs are read back from the store, and
each call is recomputed from them, so a bisection killed at any point (SIGKILL included) resumes
with ``--resume`` from the runs it has: finished batches are not run again, a batch cut short is
resumed by the runner, which discards only the run in progress.
"""

from __future__ import annotations

import json
import math
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import pandas as pd

from lisa_ext.bisect import steps as st
from lisa_ext.bisect.git_range import export_range, read_range
from lisa_ext.bisect.page import FIGURE, PAGE, PageStep, StepPage, bisection_figure, render_page
from lisa_ext.bisect.spec import (MetricChoice, Series, campaign_doc, digest, metric_matches, parse_metric,
                                  series_between, step_name, write_step_kernel, write_yaml)
from lisa_ext.campaign.runner import run_campaign
from lisa_ext.campaign.spec import CampaignSpec
from lisa_ext.campaign.spec import load_spec as load_campaign_spec
from lisa_ext.campaign.store.reader import read_campaign
from lisa_ext.campaign.store.writer import CampaignStore
from lisa_ext.errors import UserError
from lisa_ext.kernel.spec import load_variant_spec
from lisa_ext.report.build import campaign_metrics
from lisa_ext.report.figures import svg_text
from lisa_ext.schema import show

__all__ = ["STATE", "BatchRunner", "Bisector", "Outcome", "StepResult", "batch_done", "open_bisection"]

#: the bisection's own record in its directory
STATE = "bisect.json"
#: the format of :data:`STATE`
_STATE_VERSION = 1

#: runs (or finishes) one batch: its campaign spec file, its campaign directory
BatchRunner = Callable[[Path, Path], None]


def batch_done(out: Path, size: int) -> bool:
    """Whether the batch campaign in ``out`` holds all its ``size`` runs (finished, ok or failed)."""
    store = CampaignStore(out)
    return store.exists() and len(store.scan().results()) >= size


@dataclass
class StepResult:
    """A step's call and the evidence behind it."""

    k: int
    call: str
    values: list[float]
    p_good: float = math.nan
    p_bad: float = math.nan
    evidence: str = ""


@dataclass
class Outcome:
    """How the bisection ended: the culprit (1-based patch index) or the range left."""

    culprit: int | None
    lo: int
    hi: int
    verdict: str
    page: Path


def _analysis_names() -> list[str]:
    from lisa_ext.analysis.registry import ANALYSIS_CLASSES

    return sorted({cls.name for cls in ANALYSIS_CLASSES} | {cls.cli_name for cls in ANALYSIS_CLASSES})


class Bisector:
    """One bisection in its directory (see the module docstring)."""

    def __init__(self, spec: CampaignSpec, series: Series, good: str, bad: str, metric: MetricChoice,
                 directory: Path, bounds: st.Bounds, echo: Callable[[str], None], progress: bool,
                 run_batch: BatchRunner | None = None, variant: str | None = None):
        self.spec, self.series, self.metric, self.dir = spec, series, metric, directory
        self.good_name, self.bad_name = good, bad
        self.variant = next(v for v in spec.variants if v.name == (variant or good))
        self.bounds, self.echo, self.progress = bounds, echo, progress
        self.run_batch = run_batch or self._run_campaign
        self.subjects = list(series.labels)
        self.what = "commit" if series.commits else "patch"
        self.results: dict[int, StepResult] = {}
        self.unit, self.lower_is_better = "", None
        self.ends_p = math.nan
        self.started = time.monotonic()
        self.elapsed_before = float(self._state().get("elapsed_s", 0.0))

    # -- the directory ---------------------------------------------------------------------

    def _state(self) -> dict:
        path = self.dir / STATE
        return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}

    def _elapsed(self) -> float:
        return self.elapsed_before + time.monotonic() - self.started

    def _save_elapsed(self) -> None:
        state = self._state()
        state["elapsed_s"] = round(self._elapsed(), 1)
        _write_state(self.dir, state)

    def batch_dir(self, k: int, j: int) -> Path:
        return self.dir / "steps" / step_name(k) / f"b{j}"

    # -- one batch, one step ---------------------------------------------------------------

    def _run_batch(self, k: int, j: int, size: int) -> None:
        """Run (or finish) batch ``j`` of step ``k``; nothing when its runs are all stored."""
        out = self.batch_dir(k, j)
        if batch_done(out, size):
            return
        kernel = write_step_kernel(self.series, k, self.dir)
        spec_path = out.with_suffix(".yml")
        write_yaml(spec_path, campaign_doc(self.spec, self.variant, self.metric.workload,
                                           f"{self.spec.name}-bisect-{step_name(k)}-b{j}"[:64], step_name(k),
                                           os.path.relpath(kernel, spec_path.parent), size))
        self.echo(f"bisect: step {k}/{self.series.n}, batch {j + 1}: {size} run(s) of {self.metric.workload}")
        self.run_batch(spec_path, out)

    def _run_campaign(self, spec_path: Path, out: Path) -> None:
        run_campaign(load_campaign_spec(spec_path), out, resume=True, progress=self.progress, echo=self.echo)

    def _metrics(self, out: Path) -> pd.DataFrame:
        if self.metric.trace:
            return campaign_metrics(out, traces=True)
        return read_campaign(out, allow_empty=True).metrics_table()

    def samples(self, k: int) -> tuple[list[float], list[str], int]:
        """Step ``k``'s values of the metric over its batches so far, the errors of its failed runs,
        and how many runs succeeded; a metric no successful run produces is an error."""
        values: list[float] = []
        errors: list[str] = []
        ok = 0
        names: set[str] = set()
        for j in range(len(self.bounds.sizes())):
            out = self.batch_dir(k, j)
            if not CampaignStore(out).runs_dir.is_dir():  # not started, or stopped before its first run
                break
            campaign = read_campaign(out, allow_empty=True)
            errors += [f"{r.label}: {r.result.error}" for r in campaign.failed_runs]
            ok += len(campaign.ok_runs)
            table = self._metrics(out)
            table = table[(table["workload"] == self.metric.workload) & (table["variant"] == step_name(k))]
            names |= set(table["metric"])
            wanted = pd.Series([metric_matches(self.metric.metric, m, u) for m, u in zip(table["metric"], table["unit"])],
                               index=table.index, dtype=bool)
            rows = table[wanted]
            if not rows.empty:
                self.unit = str(rows["unit"].iloc[0])
                self.lower_is_better = bool(rows["lower_is_better"].iloc[0])
            values += [float(v) for v in rows.sort_values("iteration")["value"] if math.isfinite(v)]
        if ok and not values:
            raise UserError(f"--metric {self.metric.label}: no run of step {k} produces it; "
                            f"{self.metric.workload}'s metrics are: {', '.join(sorted(names)) or 'none'}"
                            f" (runs in {self.dir / 'steps' / step_name(k)})")
        return values, errors, ok

    def _skip(self, k: int, errors: list[str]) -> StepResult:
        return StepResult(k, st.SKIP, [], evidence=f"no run succeeded: {errors[0] if errors else 'no runs'}"[:300])

    # -- the ends --------------------------------------------------------------------------

    def measure_ends(self) -> tuple[list[float], list[float]]:
        """Measure both ends until they differ at the look's level, or refuse with the figures."""
        n = self.series.n
        for j, size in enumerate(self.bounds.sizes()):
            for k in (0, n):
                self._run_batch(k, j, size)
            (good, good_err, good_ok), (bad, bad_err, bad_ok) = self.samples(0), self.samples(n)
            for k, ok, errors in ((0, good_ok, good_err), (n, bad_ok, bad_err)):
                if not ok:
                    self.results[k] = self._skip(k, errors)
                    self.write_page("refused")
                    raise UserError(f"bisect: the {'good' if k == 0 else 'bad'} end ({k} {self.what}{'s' if self.series.commits else 'es'}) has no "
                                    f"successful run: {self.results[k].evidence}")
            check = st.check_ends(good, bad, self.bounds)
            self.ends_p = check.p_value
            self.results[0] = StepResult(0, st.GOOD, good)
            self.results[n] = StepResult(n, st.BAD, bad)
            self.echo(f"bisect: ends after {len(good)}+{len(bad)} runs: good {check.good_mean:.4g}, "
                      f"bad {check.bad_mean:.4g} {self.unit}, Welch p = {check.p_value:.3g}")
            self.write_page("in progress" if check.significant else "measuring the ends")
            if check.significant:
                return good, bad
        self.write_page("refused: the ends do not differ")
        raise UserError(f"bisect: {self.good_name} and {self.bad_name} do not differ on {self.metric.label} after "
                        f"{len(good)}+{len(bad)} runs: good {_figures(good)}, bad {_figures(bad)} {self.unit}, "
                        f"Welch p = {self.ends_p:.3g} (needs < {st.look_alpha(self.bounds):.3g}); nothing to "
                        f"bisect (runs kept in {self.dir})")

    # -- a step ----------------------------------------------------------------------------

    def decide(self, k: int, good: list[float], bad: list[float]) -> StepResult:
        """Step ``k``'s call: batches until the evidence decides, or the bound."""
        call = st.StepCall(None, math.nan, math.nan, math.nan, 0)
        values: list[float] = []
        for j, size in enumerate(self.bounds.sizes()):
            self._run_batch(k, j, size)
            values, errors, ok = self.samples(k)
            if not ok:
                return self._skip(k, errors)
            call = st.classify(values, good, bad, self.bounds)
            if call.call is not None:
                return StepResult(k, call.call, values, call.p_good, call.p_bad,
                                  f"p vs good {call.p_good:.3g}, vs bad {call.p_bad:.3g}")
        return StepResult(k, st.UNDECIDED, values, call.p_good, call.p_bad,
                          f"bound of {self.bounds.maximum} runs reached: p vs good {call.p_good:.3g}, "
                          f"vs bad {call.p_bad:.3g} (level {st.look_alpha(self.bounds):.3g})")

    def run(self) -> Outcome:
        good, bad = self.measure_ends()
        n = self.series.n
        while True:
            where = st.bisection(n, {k: r.call for k, r in self.results.items() if 0 < k < n})
            if where.done:
                break
            k = where.next_step
            result = self.decide(k, good, bad)
            self.results[k] = result
            self.echo(f"bisect: step {k}/{n} ({self.subjects[k - 1]}): {result.call} "
                      f"({len(result.values)} runs; {result.evidence})")
            self.write_page("in progress")
            self._save_elapsed()
        verdict = self._verdict(where)
        page = self.write_page(verdict)
        self._save_elapsed()
        return Outcome(where.found, where.lo, where.hi, verdict, page)

    def _verdict(self, where: st.Bisection) -> str:
        if where.inconsistent:
            return (f"inconsistent: step {where.lo} is good but step {where.hi} below it is bad; the metric does "
                    f"not change at one {self.what}")
        if where.found is not None:
            k = where.found
            if self.series.commits:
                return f"first bad commit: {k} of {self.series.n}, {self.subjects[k - 1]}"
            return f"first bad patch: {k} of {self.series.n}, {self.subjects[k - 1]} ({self.series.added[k - 1].name})"
        return (f"the first bad {self.what} is one of {where.lo + 1}..{where.hi}: the steps between "
                f"were skipped or undecided")

    def write_page(self, verdict: str) -> Path:
        page = StepPage(str(self.spec.path), self.good_name, self.bad_name, self.metric.label, self.unit,
                        self.lower_is_better, self.subjects, [p.name for p in self.series.added],
                        [PageStep(r.k, r.values, r.call, r.p_good, r.p_bad, r.evidence)
                         for r in sorted(self.results.values(), key=lambda r: r.k)],
                        self.ends_p, verdict, self._elapsed(), self.what)
        if page.steps:
            _replace(self.dir / FIGURE, svg_text(bisection_figure(page)))
        path = self.dir / PAGE
        _replace(path, render_page(page))
        return path


def _figures(values: list[float]) -> str:
    if not values:
        return "no values"
    mean = sum(values) / len(values)
    return f"mean {mean:.4g} of {len(values)} ({', '.join(f'{v:.4g}' for v in values)})"


def _replace(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` whole or not at all (a reader never sees half a page)."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)


def _write_state(directory: Path, state: dict) -> None:
    _replace(directory / STATE, json.dumps(state, indent=1, sort_keys=True) + "\n")


def _variant(spec: CampaignSpec, name: str, which: str):
    variant = next((v for v in spec.variants if v.name == name), None)
    if variant is None:
        raise UserError(f"{spec.path}: --{which} {show(name)} is not a variant of the spec "
                        f"(variants: {', '.join(v.name for v in spec.variants)})")
    if variant.kernel is None:
        raise UserError(f"{spec.path}: variant {name} has no kernel: bisect bisects kernel variants' patches")
    return variant


def open_bisection(spec_path: str | os.PathLike, good: str, bad: str, metric: str, directory: str | os.PathLike,
                   *, smoke: bool = False, target: str | None = None, bounds: st.Bounds | None = None,
                   resume: bool = False, echo: Callable[[str], None] = print, progress: bool = True,
                   run_batch: BatchRunner | None = None, variant: str | None = None) -> Bisector:
    """Check the input and prepare (or reopen, with ``resume``) the bisection's directory.
    ``good`` and ``bad`` are two variants of the spec, or, with ``variant``, two refs of that
    variant's git base (:mod:`lisa_ext.bisect.git_range`). ``run_batch`` runs one batch (default:
    :func:`~lisa_ext.campaign.runner.run_campaign` on it)."""
    bounds = bounds or st.Bounds()
    spec = load_campaign_spec(spec_path, smoke=smoke, target=target)
    series: Series | None = None
    if variant is None:
        good_v, bad_v = _variant(spec, good, "good"), _variant(spec, bad, "bad")
        if good_v.knobs != bad_v.knobs or good_v.workload_options != bad_v.workload_options:
            raise UserError(f"{spec.path}: variants {good} and {bad} differ in knobs or workload options, not only "
                            "in their kernels' patches; bisect bisects patches")
        series = series_between(load_variant_spec(good_v.kernel), load_variant_spec(bad_v.kernel))
        what = {"patches": [[p.name, digest(p)] for p in series.added]}
    else:
        rng = read_range(load_variant_spec(_variant(spec, variant, "variant").kernel), good, bad)
        what = {"variant": variant, "commits": [c.sha for c in rng.commits]}
    workloads = [w.name for w in spec.workloads]
    # the analyses are imported only when the metric does not name a workload (LISA is slow to load)
    analyses = [] if metric.split(":", 1)[0] in workloads else _analysis_names()
    workload, name, trace = parse_metric(metric, workloads, analyses)
    if trace and spec.trace is None:
        raise UserError(f"{spec.path}: --metric {show(metric)} is derived from traces, and the spec traces nothing "
                        "(add a trace: section)")
    state = {"version": _STATE_VERSION, "spec": str(spec.path), "smoke": smoke, "target": str(spec.target),
             "good": good, "bad": bad, "metric": metric, **what,
             "bounds": [bounds.initial, bounds.batch, bounds.maximum, bounds.alpha]}
    out = Path(directory)
    existing = out / STATE
    if existing.is_file():
        stored = json.loads(existing.read_text(encoding="utf-8"))
        if not resume:
            raise UserError(f"{out}: holds a bisection already; --resume continues it")
        mismatch = [key for key in state if stored.get(key) != state[key]]
        if mismatch:
            raise UserError(f"{existing}: {mismatch[0]} differs from this bisection's "
                            f"({show(stored.get(mismatch[0]), 60)} there); use another --out")
        state["elapsed_s"] = stored.get("elapsed_s", 0.0)
    elif out.exists() and any(out.iterdir()):
        raise UserError(f"{out}: not empty and not a bisection; choose another --out")
    out.mkdir(parents=True, exist_ok=True)
    _write_state(out, state)
    if series is None:
        series = export_range(rng, out)
        good, bad = f"{variant} at {good} ({rng.good[:12]})", f"{variant} at {bad} ({rng.bad[:12]})"
    return Bisector(spec, series, good, bad, MetricChoice(workload, name, trace), out, bounds, echo, progress,
                    run_batch, variant)
