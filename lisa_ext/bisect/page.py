"""The bisection's page: ``bisect.md`` in its directory, rewritten after every step.

It shows the ends, each step's distribution against them (n, mean ± sd, min / median / max, the
p-values against each end), its call, the verdict (the first bad patch with its subject, the
first bad commit with its hash and subject, or the range left), and the time spent. Text from
specs, patches and commits is escaped for Markdown (and for matplotlib in the figure).

The figure (``bisect.svg`` beside the page) draws every run's value at its step, coloured by the
step's call, over the two ends' bands (mean ± sd): where a step's runs fall between the ends is
what decided it, and a step that needed more runs shows why.
"""

from __future__ import annotations

import math
import textwrap
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from lisa_ext.report.drawing import COLORS
from lisa_ext.report.escape import code_span, markdown, mathtext
from lisa_ext.stats.summary import sample_sd

__all__ = ["FIGURE", "PAGE", "PageStep", "StepPage", "bisection_figure", "render_page"]

PAGE = "bisect.md"
#: the page's figure, beside it
FIGURE = "bisect.svg"
#: a step's dots by its call (the ends are called good and bad too)
_PLURAL = {"patch": "patches", "commit": "commits"}
_CALL_COLORS = {"good": COLORS[0], "bad": COLORS[1], "undecided": COLORS[2], "skip": COLORS[4]}


@dataclass
class PageStep:
    """One measured step as the page shows it."""

    k: int
    values: list[float]
    call: str
    p_good: float = math.nan
    p_bad: float = math.nan
    evidence: str = ""


@dataclass
class StepPage:
    """Everything the page shows."""

    spec: str
    good: str
    bad: str
    metric: str
    unit: str
    lower_is_better: bool | None
    subjects: list[str]
    files: list[str]
    steps: list[PageStep] = field(default_factory=list)
    ends_p: float = math.nan
    verdict: str = "in progress"
    elapsed_s: float = 0.0
    #: what a step adds: a ``patch`` of a series, or a ``commit`` of a git range
    what: str = "patch"


def _num(x: float) -> str:
    return "-" if x is None or not math.isfinite(x) else f"{x:.4g}"


def _mean_sd(values: Sequence[float]) -> tuple[float, float | None]:
    """Mean and sample standard deviation (None for a single value)."""
    arr = np.asarray(values, float)
    return float(arr.mean()), sample_sd(arr) if arr.size > 1 else None


def _distribution(values: Sequence[float]) -> tuple[str, str]:
    if not values:
        return "-", "-"
    arr = np.asarray(values, float)
    mean, sd = _mean_sd(values)
    return (f"{_num(mean)}{'' if sd is None else f' ± {_num(sd)}'}",
            f"{_num(float(arr.min()))} / {_num(float(np.median(arr)))} / {_num(float(arr.max()))}")


def render_page(page: StepPage) -> str:
    """The page as Markdown."""
    n = len(page.subjects)
    plural = _PLURAL[page.what]
    direction = {True: "lower is better", False: "higher is better", None: "direction unknown"}[page.lower_is_better]
    lines = [
        f"# Bisection of {markdown(page.metric)}", "",
        f"- spec: {code_span(page.spec)}",
        f"- good: {markdown(page.good)} (step 0), bad: {markdown(page.bad)} (step {n}, {n} {plural} more)",
        f"- metric: {markdown(page.metric)} ({markdown(page.unit) or 'no unit'}, {direction})",
        f"- ends differ: Welch p = {_num(page.ends_p)}",
        f"- **verdict: {markdown(page.verdict)}**",
        f"- time: {page.elapsed_s / 60:.1f} min", "",
        *([f"![{markdown(page.metric)} per step: every run, over the ends' mean ± sd]({FIGURE})",
           ""] if page.steps else []),
        f"## {plural.capitalize()}", "",
        f"| step | {page.what} | file |", "|---|---|---|",
    ]
    lines += [f"| {i + 1} | {markdown(s)} | {code_span(f)} |" for i, (s, f) in enumerate(zip(page.subjects, page.files))]
    lines += ["", "## Steps", "",
              "Each step's samples against the ends' (good: step 0, bad: step "
              f"{n}); p-values of Welch's test against each end.", "",
              "| step | call | n | mean ± sd | min / median / max | p vs good | p vs bad | evidence |",
              "|---|---|---|---|---|---|---|---|"]
    for step in page.steps:
        mean, spread = _distribution(step.values)
        lines.append(f"| {step.k} | {markdown(step.call)} | {len(step.values)} | {mean} | {spread} | "
                     f"{_num(step.p_good)} | {_num(step.p_bad)} | {markdown(step.evidence)} |")
    return "\n".join(lines) + "\n"


def bisection_figure(page: StepPage):
    """Every run's value at its step (x: 0 = good .. n = bad), coloured by the step's call, over
    a band per measured end (its mean ± sd); a matplotlib ``Figure``."""
    # deferred: matplotlib (~1 s) only when the figure is drawn
    from matplotlib.figure import Figure

    n = len(page.subjects)
    fig = Figure(figsize=(8.0, 8.0 / 2.2))
    ax = fig.subplots()
    ax.spines["top"].set_visible(False)
    ax.spines["right"].set_visible(False)
    for end, k in (("good", 0), ("bad", n)):
        values = next((s.values for s in page.steps if s.k == k and s.values), None)
        if values is not None:
            mean, sd = _mean_sd(values)
            sd = sd or 0.0
            ax.axhspan(mean - sd, mean + sd, color=_CALL_COLORS[end], alpha=0.15, lw=0)
            ax.axhline(mean, color=_CALL_COLORS[end], lw=1, alpha=0.6)
    for step in page.steps:
        if step.values:
            ax.scatter([step.k] * len(step.values), step.values, s=36, zorder=3,
                       color=_CALL_COLORS.get(step.call, "black"), edgecolor="k", linewidth=0.5)
    labels = [str(k) for k in range(n + 1)]
    labels[0], labels[n] = "0 (good)", f"{n} (bad)"
    ax.set_xticks(range(n + 1), labels)
    ax.set_xlim(-0.5, n + 0.5)
    ax.set_xlabel(f"step ({_PLURAL[page.what]} applied)")
    unit = f" ({page.unit})" if page.unit else ""
    ax.set_ylabel(mathtext(f"{page.metric}{unit}"))
    # a verdict names a subject and a file: wrapped, it stays within the figure's width
    ax.set_title(mathtext(textwrap.fill(f"{page.metric} per step: {page.verdict}", 90)), fontsize=10)
    return fig
