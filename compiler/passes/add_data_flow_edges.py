"""Insert ``sdy.data_flow_edge`` ops after data-flow edge owners (``sdy-add-data-flow-edges``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from jaxlib.mlir import ir

from shardc.compiler.passes.base import ModulePass
from shardc.compiler.stages.data_flow_edges import add_data_flow_edges


@dataclass(frozen=True)
class AddDataFlowEdgesPass(ModulePass):
    """Insert a data-flow edge op after every data-flow edge owner

    Reads while/case/optimization_barrier results and named/manual
    computation results and body arguments (static shapes only; tokens are
    skipped) with their current shardings. Writes an ``sdy.data_flow_edge``
    right after each owner (at the top of the block for body arguments)
    carrying the owner's sharding (manual axes erased for manual-computation
    body arguments), and redirects every other use of the owner to it.
    Produces the same module, use-list order included, as jaxlib's native
    ``sdy-add-data-flow-edges``.
    """

    name: ClassVar[str] = "shardc-add-data-flow-edges"
    needs_mesh_symbols: ClassVar[bool] = True
    aliases: ClassVar[tuple[str, ...]] = ("sdy-add-data-flow-edges",)
    upstream: ClassVar[str] = "sdy-add-data-flow-edges"

    def run(self, module: ir.Operation) -> None:
        """Add the edges to ``module``."""
        add_data_flow_edges(module)
