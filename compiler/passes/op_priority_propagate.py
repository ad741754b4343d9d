"""Propagate shardings in op-priority rounds (``sdy-op-priority-propagate``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from jaxlib.mlir import ir

from shardc.compiler.propagation.preconditions import require_mesh_symbols
from shardc.compiler.pass_base import ModulePass, option
from shardc.compiler.propagation import propagate


@dataclass(frozen=True)
class OpPriorityPropagatePass(ModulePass):
    """Propagate shardings through pass-through ops first, then everything

    Five aggressive propagation rounds; round p lets each op propagate in
    the union of the directions heuristics h0..hp allow (single-use
    pass-through ops, any pass-through ops, pass-through factors, backward
    through broadcasts, everything). Reads and writes the same attributes as
    the basic pass; produces the same module as jaxlib's native
    ``sdy-op-priority-propagate``.
    """

    name: ClassVar[str] = "shardc-op-priority-propagate"
    aliases: ClassVar[tuple[str, ...]] = ("sdy-op-priority-propagate",)
    upstream: ClassVar[str] = "sdy-op-priority-propagate"

    conservative_propagation: bool = option(
        False, help="use conservative rules and never propagate sub-axes")
    keep_sharding_rules: bool = option(
        False, help="keep the sdy.sharding_rule attribute of every visited op")

    def run(self, module: ir.Operation) -> None:
        """Propagate through ``module``."""
        require_mesh_symbols(module, self.name)
        propagate(module, strategy="op-priority", conservative=self.conservative_propagation,
                  keep_sharding_rules=self.keep_sharding_rules)
