"""Move data-flow edge shardings to their owners (``sdy-sink-data-flow-edges``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from jaxlib.mlir import ir

from shardc.compiler.passes.base import ModulePass
from shardc.compiler.stages.data_flow_edges import sink_data_flow_edges


@dataclass(frozen=True)
class SinkDataFlowEdgesPass(ModulePass):
    """Copy data-flow edge shardings to their owners and remove the edges

    Reads every ``sdy.data_flow_edge``. For each data-flow op, if an edge of
    one kind (result owners, body-argument owners) has a sharding, every owner
    of that kind gets one: the edge's, or a fully open one on the same mesh.
    Manual-computation in-shardings get their manual axes back. Each edge is
    then replaced by its input. Afterwards the module holds no data-flow
    edges. Produces the same module as jaxlib's native
    ``func.func(sdy-sink-data-flow-edges)``.
    """

    name: ClassVar[str] = "shardc-sink-data-flow-edges"
    aliases: ClassVar[tuple[str, ...]] = ("sdy-sink-data-flow-edges",)
    upstream: ClassVar[str] = "sdy-sink-data-flow-edges"

    def run(self, module: ir.Operation) -> None:
        """Sink the edges of ``module``."""
        sink_data_flow_edges(module)
