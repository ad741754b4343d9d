"""What XLA's algebraic simplifier rewrites before fusion, as the liveness walk reads it.

A ``dot_general`` that contracts no dimension (an outer product, batched or not) is
no dot once XLA has simplified the module: ``AlgebraicSimplifier::HandleDot``
rewrites it as ``multiply(broadcast(x), broadcast(y))`` (``enable_dot_to_multiply_rewrite``),
which fuses with its readers like any elementwise op. Seen in
eqx_while_fixed_point's buffer assignment: a checkpointed loop's weight-gradient
outer product is ``broadcast``/``multiply`` inside ``multiply_add_fusion``, written
over the gradient carry it is added to; read as a dot it was a buffer of its own
beside the carry.

A ``select`` whose two cases are one value is that value (``HandleSelect``): a vmapped
``lax.cond`` whose branches pass an operand on unchanged selects it from itself. Its
readers read the value, and a loop body's dot reading it reads a loop-invariant
value, which XLA then hoists out of the loop (``hoisted``): ott's batched Sinkhorn
solves, each cost matrix computed once before the loop.

``simplified_graph`` returns a view of the graph (``GraphView``) with such dots named
``stablehlo.multiply`` and such selects gone, their readers reading their value
(``removed_view``); every other attribute is the graph's own.
"""

from __future__ import annotations

from typing import Any

from jaxlib.mlir import ir
from jaxlib.mlir.dialects import stablehlo

from shardc.compiler.explain.merged import removed_view
from shardc.compiler.propagation.graph import GraphView

_DOT = "stablehlo.dot_general"
_MULTIPLY = "stablehlo.multiply"
_SELECT = "stablehlo.select"


def simplified_graph(graph: Any) -> Any:
    """``graph`` as XLA's algebraic simplifier leaves its dots and selects: a
    ``GraphView`` renaming the dots where some dot contracts nothing and merging the
    selects of one value, else ``graph`` itself."""
    outer = [op for op, name in enumerate(graph.op_name)
             if name == _DOT and not _contracted_dims(graph.ops[op])]
    if outer:
        names = list(graph.op_name)
        for op in outer:
            names[op] = _MULTIPLY
        graph = GraphView(graph, op_name=names)
    same = [op for op, name in enumerate(graph.op_name)
            if name == _SELECT and len(set(graph.op_operands[op][1:])) == 1]
    if not same:
        return graph
    return removed_view(graph, {graph.op_results[op][0]: graph.op_operands[op][1]
                                for op in same})


def _contracted_dims(op: ir.Operation) -> list[int] | None:
    """The dimensions dot ``op`` contracts of its left operand (None when unread)."""
    try:
        dims = stablehlo.DotDimensionNumbers(op.attributes["dot_dimension_numbers"])
    except (KeyError, ValueError, AttributeError):
        return None
    return list(dims.lhs_contracting_dimensions)
