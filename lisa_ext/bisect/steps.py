"""The sequential decision of one bisection step, and the bisection order.

**The ends.** The good (k = 0) and bad (k = n) kernels are measured first; their samples must
differ by Welch's t-test at the look's level (below), else there is nothing to bisect and the
bisection stops with the figures.

**A step.** The step's samples are tested against each end with Welch's t-test (unequal
variances: a step may be noisier than either end). The step is

- ``bad`` when it differs from the good end and not from the bad one, and its mean lies on the
  bad end's side of the midpoint between the ends' means;
- ``good`` the other way round;
- ambiguous otherwise (it differs from both, or from neither): more iterations are run, a batch at
  a time, up to a bound; at the bound it is ``undecided``, with the evidence.

**Why this rule.** A step is one of the two ends' kernels as far as the metric is concerned (the
culprit is in or out), so the question is which of two known distributions it was drawn from;
testing it against both and requiring a clear answer from both tests guards against calling a
step from one noisy look. Looking again after each batch inflates the error rate, so each look
uses ``alpha / looks`` (Bonferroni over the looks a step may take): the chance of a wrong call
over the whole sequence stays below ``alpha``. It is conservative and needs no model of the
metric's distribution; with the bound reached the step says ``undecided`` instead of guessing.

**The order.** ``lo`` is the highest step known good (0 at first), ``hi`` the lowest known bad (n);
the next step is the untried one nearest the middle of (lo, hi), so a step that was skipped (did
not build, boot or run) or undecided is stepped around as ``git bisect skip`` does. The first bad
patch is ``hi`` once ``hi == lo + 1``; when every step between them is skipped or undecided the
answer is the range.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np

from lisa_ext.stats.summary import sample_sd
from lisa_ext.stats.tests import Sample, welch

__all__ = ["BAD", "GOOD", "SKIP", "UNDECIDED", "Bisection", "Bounds", "EndsCheck", "StepCall", "bisection",
           "check_ends", "classify", "look_alpha"]

GOOD, BAD, SKIP, UNDECIDED = "good", "bad", "skip", "undecided"


@dataclass(frozen=True)
class Bounds:
    """How much evidence a step may gather: ``initial`` iterations, then ``batch`` more per look
    up to ``maximum``; ``alpha`` the error rate of a whole step's sequence of looks."""

    initial: int = 3
    batch: int = 2
    maximum: int = 9
    alpha: float = 0.05

    def __post_init__(self) -> None:
        if self.initial < 2 or self.batch < 1 or self.maximum < self.initial:
            raise ValueError(f"bounds need initial >= 2, batch >= 1, maximum >= initial: {self}")
        if not 0 < self.alpha < 1:
            raise ValueError(f"alpha must lie between 0 and 1, got {self.alpha}")

    @property
    def looks(self) -> int:
        """How many looks a step may take: at ``initial``, then after each batch up to ``maximum``."""
        return 1 + math.ceil((self.maximum - self.initial) / self.batch)

    def sizes(self) -> list[int]:
        """The iterations of each batch: ``[initial, batch, ..., rest]``, summing to ``maximum``."""
        sizes, total = [self.initial], self.initial
        while total < self.maximum:
            sizes.append(min(self.batch, self.maximum - total))
            total += sizes[-1]
        return sizes


def look_alpha(bounds: Bounds) -> float:
    """The level of each look: the sequence's ``alpha`` split over its looks (Bonferroni)."""
    return bounds.alpha / bounds.looks


def _sample(values: Sequence[float]) -> Sample:
    arr = np.asarray(values, float)
    return Sample(float(arr.mean()), sample_sd(arr), int(arr.size),
                  values=arr)


@dataclass(frozen=True)
class EndsCheck:
    """The two ends against each other: Welch's p-value and whether it settles the question."""

    p_value: float
    significant: bool
    good_mean: float
    bad_mean: float


def check_ends(good: Sequence[float], bad: Sequence[float], bounds: Bounds) -> EndsCheck:
    """Whether the good and bad samples differ at the look's level."""
    p = welch(_sample(good), _sample(bad)) if len(good) >= 2 and len(bad) >= 2 else math.nan
    return EndsCheck(p, bool(p < look_alpha(bounds)), float(np.mean(good)) if good else math.nan,
                     float(np.mean(bad)) if bad else math.nan)


@dataclass(frozen=True)
class StepCall:
    """A step's samples against both ends: the call (good, bad, or ``None`` while ambiguous)
    and the evidence behind it."""

    call: str | None
    p_good: float
    p_bad: float
    mean: float
    n: int


def classify(step: Sequence[float], good: Sequence[float], bad: Sequence[float], bounds: Bounds) -> StepCall:
    """The step's call at this look (see the module docstring); ``None`` when ambiguous."""
    if len(step) < 2:
        return StepCall(None, math.nan, math.nan, float(np.mean(step)) if step else math.nan, len(step))
    s = _sample(step)
    p_good, p_bad = welch(_sample(good), s), welch(_sample(bad), s)
    level = look_alpha(bounds)
    midpoint = (float(np.mean(good)) + float(np.mean(bad))) / 2
    nearer_bad = (s.mean - midpoint) * (float(np.mean(bad)) - midpoint) > 0
    call = None
    if p_good < level <= p_bad and nearer_bad:
        call = BAD
    elif p_bad < level <= p_good and not nearer_bad:
        call = GOOD
    return StepCall(call, p_good, p_bad, s.mean, s.n)


@dataclass(frozen=True)
class Bisection:
    """Where a bisection stands given the verdicts so far (step k -> good/bad/skip/undecided)."""

    lo: int
    hi: int
    next_step: int | None
    inconsistent: bool

    @property
    def done(self) -> bool:
        return self.next_step is None

    @property
    def found(self) -> int | None:
        """The first bad step (the 1-based index of the culprit patch), once only one is left."""
        return self.hi if self.done and not self.inconsistent and self.hi == self.lo + 1 else None


def bisection(n: int, verdicts: Mapping[int, str]) -> Bisection:
    """Where a bisection of ``n`` patches stands: step 0 is good and step ``n`` bad by
    construction (the ends were checked to differ)."""
    if n < 1:
        raise ValueError(f"a bisection needs at least one patch, got {n}")
    lo = max([0] + [k for k, v in verdicts.items() if v == GOOD and 0 < k < n])
    hi = min([n] + [k for k, v in verdicts.items() if v == BAD and 0 < k < n])
    if lo >= hi:  # a good step above a bad one: the metric is not monotonic in the series
        return Bisection(lo, hi, None, True)
    todo = [k for k in range(lo + 1, hi) if k not in verdicts]
    middle = (lo + hi) / 2
    nxt = min(todo, key=lambda k: (abs(k - middle), k)) if todo else None
    return Bisection(lo, hi, nxt, False)
