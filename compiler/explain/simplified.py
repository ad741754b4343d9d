"""What XLA's algebraic simplifier rewrites before fusion, as the liveness walk reads it.

A ``dot_general`` that contracts no dimension (an outer product, batched or not) is
no dot once XLA has simplified the module: ``AlgebraicSimplifier::HandleDot``
rewrites it as ``multiply(broadcast(x), broadcast(y))`` (``enable_dot_to_multiply_rewrite``),
which fuses with its readers like any elementwise op. Seen in
eqx_while_fixed_point's buffer assignment: a checkpointed loop's weight-gradient
outer product is ``broadcast``/``multiply`` inside ``multiply_add_fusion``, written
over the gradient carry it is added to; read as a dot it was a buffer of its own
beside the carry.

``simplified_graph`` returns the graph with such dots named ``stablehlo.multiply``;
every other attribute is the graph's own.
"""

from __future__ import annotations

from typing import Any

from jaxlib.mlir import ir
from jaxlib.mlir.dialects import stablehlo

_DOT = "stablehlo.dot_general"
_MULTIPLY = "stablehlo.multiply"


class SimplifiedGraph:
    """``graph`` read with its outer-product dots named as the multiplies XLA makes of
    them."""

    def __init__(self, graph: Any, op_name: list[str]) -> None:
        self._graph = graph
        self.op_name = op_name

    def __getattr__(self, name: str):
        return getattr(self._graph, name)


def simplified_graph(graph: Any) -> Any:
    """``graph`` as XLA's algebraic simplifier leaves its dots: a ``SimplifiedGraph``
    where some dot contracts nothing, else ``graph`` itself."""
    outer = [op for op, name in enumerate(graph.op_name)
             if name == _DOT and not _contracted_dims(graph.ops[op])]
    if not outer:
        return graph
    names = list(graph.op_name)
    for op in outer:
        names[op] = _MULTIPLY
    return SimplifiedGraph(graph, names)


def _contracted_dims(op: ir.Operation) -> list[int] | None:
    """The dimensions dot ``op`` contracts of its left operand (None when unread)."""
    try:
        dims = stablehlo.DotDimensionNumbers(op.attributes["dot_dimension_numbers"])
    except (KeyError, ValueError, AttributeError):
        return None
    return list(dims.lhs_contracting_dimensions)
