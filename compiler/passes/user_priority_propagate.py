"""Propagate shardings in user-priority rounds (``sdy-user-priority-propagate``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from jaxlib.mlir import ir

from shardc.compiler.propagation.preconditions import require_mesh_symbols
from shardc.compiler.pass_base import ModulePass, option
from shardc.compiler.propagation import propagate


@dataclass(frozen=True)
class UserPriorityPropagatePass(ModulePass):
    """Propagate dimension shardings in the order of their user priorities

    Dimensions marked ``pN`` with N > 0 are held back (closed, their axes
    replicated) until round N; every round is a full op-priority
    propagation. Afterwards no rewritten sharding carries a priority. Reads
    and writes the same attributes as the basic pass; produces the same
    module as jaxlib's native ``sdy-user-priority-propagate``.
    """

    name: ClassVar[str] = "shardc-user-priority-propagate"
    aliases: ClassVar[tuple[str, ...]] = ("sdy-user-priority-propagate",)
    upstream: ClassVar[str] = "sdy-user-priority-propagate"

    conservative_propagation: bool = option(
        False, help="use conservative rules and never propagate sub-axes")
    keep_sharding_rules: bool = option(
        False, help="keep the sdy.sharding_rule attribute of every visited op")

    def run(self, module: ir.Operation) -> None:
        """Propagate through ``module``."""
        require_mesh_symbols(module, self.name)
        propagate(module, strategy="user-priority", conservative=self.conservative_propagation,
                  keep_sharding_rules=self.keep_sharding_rules)
