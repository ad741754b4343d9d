"""How XLA packs temporaries into one heap: the size of the heap, not the live peak.

XLA's buffer assigner gives a program's temporaries offsets in one allocation
(``preallocated-temp`` in the buffer assignment); ``memory_analysis()`` reports
that allocation's size. Buffers live at different times share bytes, but
placed greedily a heap is larger than the most bytes live at once: a small
buffer placed in a gap early blocks a larger one later (eqx_partition_jit's
train step: 27 KiB live at its peak, a 51 KiB heap). ``heap_bytes`` replays the
assigner's packing (``GlobalDecreasingSizeBestFitHeap`` in XLA's
``heap_simulator``): buffers taken largest first (spatial order) or longest
lived first (temporal order), each placed at the offset of the smallest gap
that holds it among the buffers placed that overlap it in time, or above them
all, offsets rounded up to the platform's alignment; XLA keeps the smaller of
the two orders' heaps.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def heap_bytes(intervals: Sequence[tuple[int, int, int]], alignment: int) -> int:
    """The size of the heap XLA packs ``(start, end, bytes)`` buffers into (live at
    positions ``start`` to ``end`` inclusive), the smaller of its two orders."""
    buffers = [(s, e, _round_up(n, alignment)) for s, e, n in intervals if n > 0]
    if not buffers:
        return 0
    spatial = sorted(range(len(buffers)),
                     key=lambda k: (-buffers[k][2], -(buffers[k][1] - buffers[k][0]), k))
    temporal = sorted(range(len(buffers)),
                      key=lambda k: (-(buffers[k][1] - buffers[k][0]), -buffers[k][2], k))
    return min(_best_fit(buffers, spatial, alignment), _best_fit(buffers, temporal, alignment))


def _best_fit(buffers: list[tuple[int, int, int]], order: list[int], alignment: int) -> int:
    """The heap size when ``buffers`` are placed in ``order``, each in the smallest
    free gap among the placed buffers overlapping it in time (or on top of them)."""
    count = len(buffers)
    starts = np.empty(count, dtype=np.int64)
    ends = np.empty(count, dtype=np.int64)
    lows = np.empty(count, dtype=np.int64)
    highs = np.empty(count, dtype=np.int64)
    top = 0
    for placed, k in enumerate(order):
        start, end, size = buffers[k]
        overlap = (starts[:placed] <= end) & (ends[:placed] >= start)
        offset = gap(lows[:placed][overlap], highs[:placed][overlap], size, alignment)
        starts[placed], ends[placed] = start, end
        lows[placed], highs[placed] = offset, offset + size
        top = max(top, offset + size)
    return top


def gap(lows: np.ndarray, highs: np.ndarray, size: int, alignment: int) -> int:
    """The offset of the smallest free gap of at least ``size`` bytes between the
    chunks ``[lows, highs)``, or the first aligned offset above them all."""
    if not len(lows):
        return 0
    order = np.argsort(lows, kind="stable")
    starts = lows[order]
    ends = -(-highs[order] // alignment) * alignment
    reached = np.maximum.accumulate(ends)
    before = np.concatenate(([0], reached[:-1]))  # the free space starts here
    gaps = starts - before
    fits = gaps >= size
    if not fits.any():
        return int(reached[-1])
    return int(before[np.argmin(np.where(fits, gaps, np.iinfo(np.int64).max))])


def _round_up(n: int, multiple: int) -> int:
    return -(-n // multiple) * multiple if multiple > 1 else n
