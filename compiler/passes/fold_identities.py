"""The ``shardc-fold-identities`` pass (``stages.fold_identities`` does the work)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from jaxlib.mlir import ir

from shardc.compiler.passes.base import ModulePass
from shardc.compiler.stages.fold_identities import fold_identities


@dataclass(frozen=True)
class FoldIdentitiesPass(ModulePass):
    """Fold shape ops that return their operand unchanged, as XLA's import does

    Folds a slice of the whole operand with unit strides, a pad of zeros, a
    same-type reshape or convert, an identity transpose or broadcast_in_dim,
    a reverse of no dimension and a one-operand concatenate: their uses take
    the operand. A broadcast_in_dim that only inserts unit dimensions becomes
    a reshape. Ops carrying a sharding of their own are kept. ``jit`` runs
    this before propagation so that propagation sees the module XLA's own
    Shardy sees (XLA folds these when it converts StableHLO to HLO).
    """

    name: ClassVar[str] = "shardc-fold-identities"

    def run(self, module: ir.Operation) -> None:
        """Fold the identity shape ops of ``module``."""
        fold_identities(module)
