"""Order statistics of the suites' errors: one percentile, used for every median and p90."""

from __future__ import annotations

import math
from collections.abc import Sequence

__all__ = ["median", "p90", "percentile"]


def percentile(values: Sequence[float], q: float) -> float | None:
    """q-quantile (0..1), linear interpolation between order statistics (numpy's default);
    None for no values."""
    if not values:
        return None
    xs = sorted(values)
    pos = (len(xs) - 1) * q
    lo, hi = math.floor(pos), math.ceil(pos)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def median(values: Sequence[float]) -> float | None:
    """The 0.5-quantile of ``percentile``; None for no values."""
    return percentile(values, 0.5)


def p90(values: Sequence[float]) -> float | None:
    """The 0.9-quantile of ``percentile``; None for no values."""
    return percentile(values, 0.9)
