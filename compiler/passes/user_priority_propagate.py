"""Propagate shardings in user-priority rounds (``sdy-user-priority-propagate``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from shardc.compiler.passes.propagate_common import PropagatePassBase


@dataclass(frozen=True)
class UserPriorityPropagatePass(PropagatePassBase):
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
    plan: ClassVar[str] = "user-priority"
