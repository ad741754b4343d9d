"""Summary statistics the benchmark tables share."""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable


def geomean(ratios: Iterable[float]) -> float:
    """The geometric mean of ``ratios`` (all positive)."""
    return math.exp(statistics.fmean(math.log(r) for r in ratios))
