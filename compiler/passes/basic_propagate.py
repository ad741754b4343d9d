"""Propagate shardings with Shardy's basic strategy (``sdy-basic-propagate``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from jaxlib.mlir import ir

from shardc.compiler.propagation.preconditions import require_mesh_symbols
from shardc.compiler.pass_base import ModulePass, option
from shardc.compiler.propagation import propagate


@dataclass(frozen=True)
class BasicPropagatePass(ModulePass):
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

    conservative_propagation: bool = option(
        False, help="use conservative rules and never propagate sub-axes")
    keep_sharding_rules: bool = option(
        False, help="keep the sdy.sharding_rule attribute of every visited op")

    def run(self, module: ir.Operation) -> None:
        """Propagate through ``module``."""
        require_mesh_symbols(module, self.name)
        propagate(module, strategy="basic", conservative=self.conservative_propagation,
                  keep_sharding_rules=self.keep_sharding_rules)
