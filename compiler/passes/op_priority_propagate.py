"""Propagate shardings in op-priority rounds (``sdy-op-priority-propagate``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from shardc.compiler.passes.propagate_common import PropagatePassBase


@dataclass(frozen=True)
class OpPriorityPropagatePass(PropagatePassBase):
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
    plan: ClassVar[str] = "op-priority"
