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

An add of zeros, a subtract of zeros, a multiply or a divide by ones is its operand
(``HandleAdd``'s ``A + 0 => A`` and its kind): ``forwarded`` names it. A frozen
parameter's update (``optax.set_to_zero``: ``table + 0``) leaves the donated
argument as the output, nothing written over it.
"""

from __future__ import annotations

from typing import Any

from jaxlib.mlir import ir
from jaxlib.mlir.dialects import stablehlo

from shardc.compiler.explain.merged import removed_view
from shardc.compiler.propagation.graph import GraphView

_DOT = "stablehlo.dot_general"
# op -> (the splat that leaves the operand unchanged, the operands it may stand at)
_NEUTRAL = {"stablehlo.add": (0.0, (0, 1)), "stablehlo.subtract": (0.0, (1,)),
            "stablehlo.multiply": (1.0, (0, 1)), "stablehlo.divide": (1.0, (1,))}
_CONSTANTS = frozenset({"stablehlo.constant", "sdy.constant"})
_PASSED = frozenset({"stablehlo.broadcast_in_dim", "stablehlo.convert", "stablehlo.reshape"})
_FOLDED = {"stablehlo.add": lambda a, b: a + b, "stablehlo.subtract": lambda a, b: a - b,
           "stablehlo.multiply": lambda a, b: a * b, "stablehlo.divide": lambda a, b: a / b,
           "stablehlo.negate": lambda a: -a}
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


def forwarded(graph: Any, value: int) -> int:
    """The value XLA's algebraic simplifier leaves in place of ``value``: the other
    operand of an add or subtract of zeros or a multiply or divide by ones, through
    any number of them; else ``value`` itself."""
    while True:
        op = graph.value_def[value]
        neutral = _NEUTRAL.get(graph.op_name[op]) if op >= 0 else None
        if neutral is None:
            return value
        operands = graph.op_operands[op]
        kept = [operands[1 - k] for k in neutral[1] if _splat_value(graph, operands[k]) == neutral[0]]
        if not kept:
            return value
        value = kept[0]


def _splat_value(graph: Any, value: int) -> float | None:
    """The number in every element of ``value`` where it is one XLA's constant folding
    computes (a constant, broadcast, converted, combined with others: ``0.1 * zeros``),
    else None."""
    op = graph.value_def[value]
    if op < 0:
        return None
    name = graph.op_name[op]
    if name in _CONSTANTS:
        try:
            dense = ir.DenseElementsAttr(graph.ops[op].attributes["value"])
            splat = dense.get_splat_value() if dense.is_splat else None
        except (KeyError, ValueError, TypeError):
            return None
        return splat.value if isinstance(splat, (ir.FloatAttr, ir.IntegerAttr)) else None
    if name in _PASSED:
        return _splat_value(graph, graph.op_operands[op][0])
    if name not in _FOLDED:
        return None
    numbers = [_splat_value(graph, operand) for operand in graph.op_operands[op]]
    if None in numbers:
        return None
    try:
        return _FOLDED[name](*numbers)
    except ZeroDivisionError:
        return None
