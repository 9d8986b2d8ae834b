"""Small statistics shared by the reports and the benchmark scripts."""

from __future__ import annotations

import math
from collections.abc import Sequence


def percentile(values: Sequence[float], q: float) -> float | None:
    """The nearest-rank ``q`` quantile (``q`` in 0..1) of ``values``; None when there are none.

    Nearest rank: the smallest value with at least ``q`` of the values at or below it, so a
    p99 over 100 samples is the 99th, not an interpolation between two.
    """
    if not values:
        return None
    if not 0.0 <= q <= 1.0:
        raise ValueError(f"q must lie in [0, 1], got {q}")
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]
