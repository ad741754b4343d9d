"""Which temporaries XLA:TPU keeps in on-chip memory rather than in HBM.

XLA:TPU's memory-space assignment (``MemorySpaceAssignment``) gives buffers a
place in the core's vector memory (VMEM, the ``S(1)`` of a layout in its
optimized HLO; the buffer assignment's color-1 ``preallocated-temp``) while
that has room, and evicts a buffer that lives long to HBM (``copy-start`` to
the default memory space, ``copy-done`` before its reader): short-lived
buffers cost no HBM. The memory-usage report of the llama-shaped train steps
compiled for v5e holds the forward's and backward's fusion outputs of a
layer, the gathered output projection and the logits' gradient in VMEM (up
to 112 MiB of it in every compile, ``PlatformRules.on_chip_bytes``), and in
HBM the activations saved for the backward, their copies in a second layout
and the logits.

``on_chip(intervals, capacity, length)`` replays that choice on the liveness
walk's buffers (``liveness.Interval``): shortest-lived first (a tie: the larger
first), a buffer goes on chip when it fits beside those already there at every
position it is live; ``split_peak`` is the live peak of the others, a loop
body's share of HBM while the loop runs, and of those on chip.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from shardc.compiler.explain.heap import gap


def on_chip(intervals: Sequence, capacity: int, length: int, *, body: bool,
            step: int = 1) -> list:
    """The buffers of ``intervals`` (positions ``0 .. length - 1`` of a block, ``step``
    per op; ``body``: a loop body's) placed in ``capacity`` bytes of on-chip memory.

    In a loop body any buffer may be (a scanned layer's activations live within an
    iteration); in the program's own block a collective's result (a gathered
    weight: XLA:TPU's asynchronous collectives write into VMEM) and a buffer read
    only by the op right after the one writing it, the others being the values
    kept for the backward, which memory-space assignment evicts to HBM. A nested
    body's peak and the buffers an op holds only while it runs (``fits_output``
    false) stay where the walk puts them: they are many buffers, or the op's own;
    a loop body's on-chip buffers (``Interval.on_chip``) take their bytes while it
    runs."""
    if capacity <= 0 or length <= 0:
        return []
    chunks: list[tuple[int, int, int, int]] = [  # (start, end, offset, offset + size)
        (iv.start, iv.end, 0, iv.on_chip) for iv in intervals if iv.on_chip]
    placed = []
    candidates = [iv for iv in intervals if iv.fits_output and 0 < iv.size <= capacity
                  and (body or iv.moved or iv.end - iv.start <= step)]
    for interval in sorted(candidates,
                           key=lambda iv: (not iv.moved, iv.end - iv.start, -iv.size)):
        near = [c for c in chunks if c[0] <= interval.end and c[1] >= interval.start]
        offset = gap(np.array([c[2] for c in near], dtype=np.int64),
                     np.array([c[3] for c in near], dtype=np.int64), interval.size, 1)
        if offset + interval.size <= capacity:
            chunks.append((interval.start, interval.end, offset, offset + interval.size))
            placed.append(interval)
    return placed


def split_peak(intervals: Sequence, capacity: int, length: int,
               step: int = 1) -> tuple[int, int]:
    """The most bytes of a loop body's ``intervals`` live at once outside on-chip
    memory, and the most on chip (its nested loops' own included)."""
    placed = on_chip(intervals, capacity, length, body=True, step=step)
    chip = {id(iv) for iv in placed}
    nested = [iv for iv in intervals if iv.on_chip]
    on = live_peak([*placed, *(type(iv)(iv.start, iv.end, iv.on_chip, None) for iv in nested)],
                   length)[0]
    return live_peak([iv for iv in intervals if id(iv) not in chip], length)[0], min(on, capacity)


def live_peak(intervals: Sequence, length: int) -> tuple[int, int]:
    """The largest sum of live intervals, and the first position reaching it."""
    change = [0] * (length + 1)
    for interval in intervals:
        change[interval.start] += interval.size
        change[interval.end + 1] -= interval.size
    live, best, at = 0, 0, 0
    for i in range(length):
        live += change[i]
        if live > best:
            best, at = live, i
    return best, at
