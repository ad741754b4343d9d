"""Pausing Python's cyclic garbage collector around a propagation."""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator


@contextlib.contextmanager
def cyclic_gc_paused() -> Iterator[None]:
    """Pause cyclic garbage collection (as it was before, after).

    A run that allocates many small tuples and frees none of them until the end
    (a propagation, the cost-aware search) gains nothing from it: the collector
    would only rescan the growing heap, and time per op would grow with the module.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
