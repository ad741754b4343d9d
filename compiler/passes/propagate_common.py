"""What the propagation passes share: their options and ``run``.

``shardc-basic-propagate``, ``-aggressive-``, ``-op-priority-`` and
``-user-priority-propagate`` differ only in the plan they hand to the one
generic engine (``shardc.compiler.propagation.propagate``); this base holds
the rest. ``shardc-propagation-pipeline`` takes the two propagation options
too, from ``PropagationOptions``, so their flags and help are declared once.
Neither base is a pass itself or in ``ALL_PASSES``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from jaxlib.mlir import ir

from shardc.compiler.passes.base import ModulePass, option
from shardc.compiler.propagation import propagate
from shardc.compiler.propagation.preconditions import require_mesh_symbols


@dataclass(frozen=True)
class PropagationOptions(ModulePass):
    """The options of every pass that propagates (they come first in its option list)."""

    conservative_propagation: bool = option(
        False, help="use conservative rules and never propagate sub-axes")
    keep_sharding_rules: bool = option(
        False, help="keep the sdy.sharding_rule attribute of every visited op")


@dataclass(frozen=True)
class PropagatePassBase(PropagationOptions):
    """Shared options and run of the propagation passes (subclasses set ``plan``)."""

    plan: ClassVar[str] = ""

    debug_sharding_origins: bool = option(
        False, help="save on each sharding which user sharding each axis came from")

    def plan_name(self) -> str:
        """The engine plan this pass runs."""
        return self.plan

    def run(self, module: ir.Operation) -> None:
        """Propagate through ``module``."""
        require_mesh_symbols(module, self.name)
        propagate(module, plan=self.plan_name(),
                  conservative=self.conservative_propagation,
                  keep_sharding_rules=self.keep_sharding_rules,
                  debug_sharding_origins=self.debug_sharding_origins)
