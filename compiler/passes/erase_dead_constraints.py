"""The ``shardc-erase-dead-constraints`` pass (``stages.dead_constraints`` does the work)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from jaxlib.mlir import ir

from shardc.compiler.passes.base import ModulePass
from shardc.compiler.stages.dead_constraints import constraints_of, erase_dead_constraints


@dataclass(frozen=True)
class EraseDeadConstraintsPass(ModulePass):
    """Erase the sharding constraints nothing reads, as XLA does before Shardy

    An ``sdy.sharding_constraint`` whose result is unused is erased, then every
    constraint or effect-free op (without regions) that only fed erased ops.
    XLA writes a constraint as a custom call without side effects, which its
    dead-code elimination erases before Shardy imports the module; ``jit`` runs
    this before propagation so that a dead constraint in a loop body or a cond
    branch shards nothing, as under ``jax.jit``.
    """

    name: ClassVar[str] = "shardc-erase-dead-constraints"

    def run(self, module: ir.Operation) -> None:
        """Erase the dead constraints of ``module``."""
        erase_dead_constraints(constraints_of(module))
