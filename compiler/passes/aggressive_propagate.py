"""Propagate shardings with Shardy's aggressive strategy (``sdy-aggressive-propagate``)."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import ClassVar

from jaxlib.mlir import ir

from shardc.compiler.propagation.preconditions import require_mesh_symbols
from shardc.compiler.pass_base import ModulePass, option
from shardc.compiler.propagation import propagate


class PropagationStrategy(enum.Enum):
    """Which factor strategies the aggressive pass runs."""

    AGGRESSIVE = "aggressive"
    BASIC_THEN_AGGRESSIVE = "basic-then-aggressive"


@dataclass(frozen=True)
class AggressivePropagatePass(ModulePass):
    """Propagate shardings, resolving factor conflicts per tensor

    Like ``shardc-basic-propagate`` but each tensor decides on its own: an
    axis that conflicts in one tensor only stays out of that tensor, and
    factors compete in order of their largest source tensor. Reads and
    writes the same attributes as the basic pass; produces the same module
    as jaxlib's native ``sdy-aggressive-propagate``.
    """

    name: ClassVar[str] = "shardc-aggressive-propagate"
    aliases: ClassVar[tuple[str, ...]] = ("sdy-aggressive-propagate",)
    upstream: ClassVar[str] = "sdy-aggressive-propagate"

    propagation_strategy: PropagationStrategy = option(
        PropagationStrategy.AGGRESSIVE,
        help="aggressive, or a basic run followed by an aggressive one")
    conservative_propagation: bool = option(
        False, help="use conservative rules and never propagate sub-axes")
    keep_sharding_rules: bool = option(
        False, help="keep the sdy.sharding_rule attribute of every visited op")

    def run(self, module: ir.Operation) -> None:
        """Propagate through ``module``."""
        require_mesh_symbols(module, self.name)
        propagate(module, strategy=self.propagation_strategy.value,
                  conservative=self.conservative_propagation,
                  keep_sharding_rules=self.keep_sharding_rules)
