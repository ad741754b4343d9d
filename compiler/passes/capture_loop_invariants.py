"""The ``shardc-capture-loop-invariants`` pass (``stages.capture_loop_invariants`` does the work)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from jaxlib.mlir import ir

from shardc.compiler.passes.base import ModulePass
from shardc.compiler.stages.capture_loop_invariants import capture_loop_invariants


@dataclass(frozen=True)
class CaptureLoopInvariantsPass(ModulePass):
    """Make invariant loop carries free variables, as XLA's import does

    Every carry a ``stablehlo.while`` body returns unchanged becomes a free
    variable of the loop (its uses inside and after the loop read the value
    the loop was given), then every free variable of a loop that has a
    sharding is read inside the loop through a fully open
    ``sdy.sharding_constraint`` placed before it. ``jit`` runs this before
    propagation so that propagation sees the module XLA's own Shardy sees.
    """

    name: ClassVar[str] = "shardc-capture-loop-invariants"

    def run(self, module: ir.Operation) -> None:
        """Capture the invariant carries of every loop of ``module``."""
        capture_loop_invariants(module)
