"""Two-sample significance tests used to mark a change as real.

Every test returns a two-sided p-value; a change is significant when
``p < alpha``. Available tests:

``welch``
    Welch's unequal-variance t-test on the raw samples (the default). Works
    from (mean, stddev, n) alone too, so published summaries can be tested.
``mwu``
    Mann-Whitney U, exact for small samples. With 3 runs per side its smallest
    possible p-value is 0.1, so it can never flag a 3-vs-3 change at alpha=0.05.
``ks``
    Two-sample Kolmogorov-Smirnov, what LISA's own comparisons use. Same
    floor as MWU for 3 vs 3.
``mmtests``
    mmtests' rule since late 2024: a result is starred when the difference of
    the two means exceeds the sum of the two facing half-widths, where each
    half-width is ``qnorm(1 - alpha/2) * stddev``: the standard deviation of
    the samples, *not* divided by sqrt(n). It is a spread-overlap rule, not a
    test of the mean; more iterations do not make it more sensitive. The
    p-value reported for it is the alpha at which the star would just appear,
    ``2 * (1 - Phi(|diff| / (sd_base + sd_new)))``, so ``p < alpha`` is exactly
    the starring rule.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np
from scipy import stats as sps

from lisa_ext.stats.summary import sample_sd

__all__ = [
    "Sample",
    "TESTS",
    "DEFAULT_TEST",
    "welch",
    "mann_whitney",
    "kolmogorov_smirnov",
    "mmtests_rule",
    "mmtests_halfwidth",
    "p_value",
]

DEFAULT_TEST = "welch"


@dataclass(frozen=True)
class Sample:
    """One side of a comparison: raw values when known, else only its summary."""

    mean: float
    stddev: float
    n: int
    values: Sequence[float] | None = None
    #: mean of the raw values (differs from ``mean`` when that is an hmean/gmean)
    amean: float | None = None


def _finite(*xs: float) -> bool:
    return all(x is not None and math.isfinite(x) for x in xs)


def welch(base: Sample, new: Sample) -> float:
    """Welch's t-test p-value (two-sided); NaN when either side has n < 2.

    Two samples without spread (within rounding of their means) give 1 when their means
    are equal and 0 otherwise, instead of scipy's warning about nearly identical data."""
    if base.values is not None and new.values is not None:
        a, b = np.asarray(base.values, float), np.asarray(new.values, float)
        if a.size < 2 or b.size < 2:
            return math.nan
        ma, mb, sa, sb, na, nb = a.mean(), b.mean(), sample_sd(a), sample_sd(b), a.size, b.size
    else:
        ma = base.amean if base.amean is not None else base.mean
        mb = new.amean if new.amean is not None else new.mean
        sa, sb, na, nb = base.stddev, new.stddev, base.n, new.n
        if na < 2 or nb < 2 or not _finite(ma, mb, sa, sb):
            return math.nan
    # a spread below the means' rounding is no spread: scipy would warn of catastrophic cancellation
    scale = 1e-12 * max(abs(ma), abs(mb), 1e-300)
    if max(sa, sb) <= scale:
        return 1.0 if abs(ma - mb) <= scale else 0.0
    return float(sps.ttest_ind_from_stats(ma, sa, na, mb, sb, nb, equal_var=False).pvalue)


def _raw_values(base: Sample, new: Sample) -> tuple[np.ndarray, np.ndarray] | None:
    if base.values is None or new.values is None:
        return None
    a, b = np.asarray(base.values, float), np.asarray(new.values, float)
    if a.size == 0 or b.size == 0:
        return None
    return a, b


def mann_whitney(base: Sample, new: Sample) -> float:
    """Mann-Whitney U two-sided p-value; NaN without raw values."""
    ab = _raw_values(base, new)
    if ab is None:
        return math.nan
    return float(sps.mannwhitneyu(ab[0], ab[1], alternative="two-sided").pvalue)


def kolmogorov_smirnov(base: Sample, new: Sample) -> float:
    """Two-sample KS two-sided p-value; NaN without raw values."""
    ab = _raw_values(base, new)
    if ab is None:
        return math.nan
    return float(sps.ks_2samp(ab[0], ab[1]).pvalue)


def mmtests_halfwidth(stddev: float, alpha: float) -> float:
    """``qnorm(1 - alpha/2) * stddev``: mmtests' half-width, not divided by sqrt(n)."""
    return float(sps.norm.ppf(1.0 - alpha / 2.0) * stddev)


def mmtests_rule(base: Sample, new: Sample) -> float:
    """p-value equivalent of mmtests' overlap rule (see the module docstring)."""
    if not _finite(base.mean, new.mean, base.stddev, new.stddev) or base.n < 2 or new.n < 2:
        return math.nan
    spread = base.stddev + new.stddev
    diff = abs(new.mean - base.mean)
    if spread == 0:
        return 1.0 if diff == 0 else 0.0
    return float(2.0 * sps.norm.sf(diff / spread))


#: test name -> function(base, new) -> two-sided p-value
TESTS: dict[str, Callable[[Sample, Sample], float]] = {
    "welch": welch,
    "mwu": mann_whitney,
    "ks": kolmogorov_smirnov,
    "mmtests": mmtests_rule,
}


def p_value(test: str, base: Sample, new: Sample) -> float:
    """Run the named test; raises ValueError for an unknown name."""
    try:
        func = TESTS[test]
    except KeyError:
        raise ValueError(f"unknown test {test!r}; expected one of {', '.join(TESTS)}") from None
    return func(base, new)
