"""Propagate shardings with Shardy's basic strategy (``sdy-basic-propagate``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from shardc.compiler.passes.propagate_common import PropagatePassBase


@dataclass(frozen=True)
class BasicPropagatePass(PropagatePassBase):
    """Propagate shardings along compatible axes of every op's factors

    Reads ``sdy.sharding`` on func arguments/results and op results, the
    shardings of ``sdy.sharding_constraint``/``sdy.reshard``/
    ``sdy.data_flow_edge`` and ``sdy.sharding_group`` ops. Runs Shardy's worklist
    once in Python: every op with a sharding rule gets the axes all its
    tensors can take along each factor; unused pure ops are erased. Writes
    the widened shardings (inferred dimensions stay open) and, with
    ``keep-sharding-rules``, the ``sdy.sharding_rule`` of every visited op.
    Requires static shapes and meshes referenced by symbol. Produces the
    same module as jaxlib's native ``sdy-basic-propagate``.
    """

    name: ClassVar[str] = "shardc-basic-propagate"
    aliases: ClassVar[tuple[str, ...]] = ("sdy-basic-propagate",)
    upstream: ClassVar[str] = "sdy-basic-propagate"
    plan: ClassVar[str] = "basic"
