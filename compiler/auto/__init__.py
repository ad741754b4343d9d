"""AUTO shardings: shardc chooses the shardings of arguments, results and activations.

``jit(f, in_shardings=AUTO, out_shardings=AUTO, mesh=mesh)`` (or AUTO as some
leaves only) searches, per signature, the shardings of the AUTO arguments that
minimise the modelled step time (``objective``) within a per-device memory
budget (``jit(..., memory_budget=BYTES)``), propagating each candidate with
shardc's own engine (``evaluate``), repeated layers searched once
(``candidates``, ``search``); the results and activations follow by
propagation. ``lowered.auto_report()`` says why each choice won
(``report``). See docs/auto-sharding.md.
"""

from __future__ import annotations

from shardc.compiler.auto.evaluate import modelled_step
from shardc.compiler.auto.function import AutoJitFunction
from shardc.compiler.auto.marker import AUTO, AutoShardingError, has_auto, is_auto, without_auto
from shardc.compiler.auto.report import AutoReport

__all__ = ["AUTO", "AutoJitFunction", "AutoReport", "AutoShardingError", "has_auto", "is_auto",
           "modelled_step", "without_auto"]
