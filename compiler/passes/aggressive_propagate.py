"""Propagate shardings with Shardy's aggressive strategy (``sdy-aggressive-propagate``)."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import ClassVar

from shardc.compiler.passes.base import option
from shardc.compiler.passes.propagate_common import PropagatePassBase


class PropagationStrategy(enum.Enum):
    """Which factor strategies the aggressive pass runs."""

    AGGRESSIVE = "aggressive"
    BASIC_THEN_AGGRESSIVE = "basic-then-aggressive"


@dataclass(frozen=True)
class AggressivePropagatePass(PropagatePassBase):
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

    def plan_name(self) -> str:
        """The engine plan: aggressive, or basic-then-aggressive."""
        return self.propagation_strategy.value
