"""What XLA's algebraic simplifier rewrites before fusion, as the liveness walk reads it.

A ``dot_general`` that contracts no dimension (an outer product, batched or not) is
no dot once XLA has simplified the module: ``AlgebraicSimplifier::HandleDot``
rewrites it as ``multiply(broadcast(x), broadcast(y))`` (``enable_dot_to_multiply_rewrite``),
which fuses with its readers like any elementwise op. Seen in
eqx_while_fixed_point's buffer assignment: a checkpointed loop's weight-gradient
outer product is ``broadcast``/``multiply`` inside ``multiply_add_fusion``, written
over the gradient carry it is added to; read as a dot it was a buffer of its own
beside the carry.

``simplified_graph`` returns a view of the graph (``GraphView``) with such dots named
``stablehlo.multiply``; every other attribute is the graph's own.
"""

from __future__ import annotations

from typing import Any

from jaxlib.mlir import ir
from jaxlib.mlir.dialects import stablehlo

from shardc.compiler.propagation.graph import GraphView

_DOT = "stablehlo.dot_general"
_MULTIPLY = "stablehlo.multiply"


def simplified_graph(graph: Any) -> Any:
    """``graph`` as XLA's algebraic simplifier leaves its dots: a ``GraphView``
    renaming them where some dot contracts nothing, else ``graph`` itself."""
    outer = [op for op, name in enumerate(graph.op_name)
             if name == _DOT and not _contracted_dims(graph.ops[op])]
    if not outer:
        return graph
    names = list(graph.op_name)
    for op in outer:
        names[op] = _MULTIPLY
    return GraphView(graph, op_name=names)


def _contracted_dims(op: ir.Operation) -> list[int] | None:
    """The dimensions dot ``op`` contracts of its left operand (None when unread)."""
    try:
        dims = stablehlo.DotDimensionNumbers(op.attributes["dot_dimension_numbers"])
    except (KeyError, ValueError, AttributeError):
        return None
    return list(dims.lhs_contracting_dimensions)
