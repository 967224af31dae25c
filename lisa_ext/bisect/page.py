"""The bisection's page: ``bisect.md`` in its directory, rewritten after every step.

It shows the ends, each step's distribution against them (n, mean ± sd, min / median / max, the
p-values against each end), its call, the verdict (the first bad patch with its subject, the
first bad commit with its hash and subject, or the range left), and the time spent. Text from
specs, patches and commits is escaped for Markdown.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from lisa_ext.report.escape import code_span, markdown

__all__ = ["PAGE", "PageStep", "StepPage", "render_page"]

PAGE = "bisect.md"


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


def _distribution(values: Sequence[float]) -> tuple[str, str]:
    if not values:
        return "-", "-"
    arr = np.asarray(values, float)
    sd = f" ± {_num(float(arr.std(ddof=1)))}" if arr.size > 1 else ""
    return (f"{_num(float(arr.mean()))}{sd}",
            f"{_num(float(arr.min()))} / {_num(float(np.median(arr)))} / {_num(float(arr.max()))}")


def render_page(page: StepPage) -> str:
    """The page as Markdown."""
    n = len(page.subjects)
    plural = {"patch": "patches", "commit": "commits"}[page.what]
    direction = {True: "lower is better", False: "higher is better", None: "direction unknown"}[page.lower_is_better]
    lines = [
        f"# Bisection of {markdown(page.metric)}", "",
        f"- spec: {code_span(page.spec)}",
        f"- good: {markdown(page.good)} (step 0), bad: {markdown(page.bad)} (step {n}, {n} {plural} more)",
        f"- metric: {markdown(page.metric)} ({markdown(page.unit) or 'no unit'}, {direction})",
        f"- ends differ: Welch p = {_num(page.ends_p)}",
        f"- **verdict: {markdown(page.verdict)}**",
        f"- time: {page.elapsed_s / 60:.1f} min", "",
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
