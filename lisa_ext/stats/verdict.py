"""Whether our change goes the RFC's way, judged on a confidence interval, not a point estimate.

A study compares one variant with a baseline as an RFC did, and says whether the direction
agrees. The sign of our mean change alone cannot say it: a 0.3 % change inside a ±20 % noise
"agrees" as much as it "disagrees". So the verdict comes from the confidence interval of our
change (:func:`lisa_ext.stats.change.pct_change_ci`): it excludes 0 on the RFC's side
(**agrees**), on the other side (**opposite**), or contains 0 (**no change within noise**).
When the RFC itself reports no change, an interval containing 0 agrees and one excluding it
is **opposite**. Without an interval (fewer than two runs on a side) there is no verdict.
"""

from __future__ import annotations

import math

__all__ = ["AGREES", "NO_VERDICT", "OPPOSITE", "WITHIN_NOISE", "direction_verdict", "sign_of"]

AGREES = "agrees"
OPPOSITE = "opposite"
WITHIN_NOISE = "no change within noise"
NO_VERDICT = "no verdict"


def sign_of(pct: float, tolerance_pct: float = 0.0) -> int:
    """-1, 0 or 1: the direction of a published change, 0 within ``tolerance_pct``."""
    return 0 if abs(pct) <= tolerance_pct else (1 if pct > 0 else -1)


def direction_verdict(low: float, high: float, rfc_sign: int) -> str:
    """:data:`AGREES`, :data:`OPPOSITE` or :data:`WITHIN_NOISE` for our change's confidence
    interval ``[low, high]`` (%) against the RFC's direction ``rfc_sign`` (-1, 0, 1);
    :data:`NO_VERDICT` without an interval."""
    if math.isnan(low) or math.isnan(high):
        return NO_VERDICT
    ours = 1 if low > 0 else (-1 if high < 0 else 0)
    if ours == 0:
        return AGREES if rfc_sign == 0 else WITHIN_NOISE
    return AGREES if ours == rfc_sign else OPPOSITE
