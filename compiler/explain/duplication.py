"""Which fusible producers XLA duplicates into their several consumers.

XLA's instruction fusion fuses a producer read by several consumers into each
of them (duplicating it) unless it is expensive (``IsExpensive``: exp, log,
rsqrt, a reduction, a float division, ...) or
``InstructionFusion::ComputeGloballyUnfusible`` forbids it. That forbids a
producer reading more than it writes unless every consumer can fuse it; a
producer reading at most one "large" operand (``EffectivelyAtMostUnary``:
broadcasts, iotas and scalar constants do not count; an operand counts when
its rank, ignoring unit dimensions, is at least the result's) is always
duplicable, and so is one whose operands hold no more elements in all than its
result. Such a cheap producer is fused into every consumer that can take it
even when a convolution or a dot reads it too (it is then also a buffer, for
those): a ReLU of a batch norm of a convolution, read by the next convolution
and by the backward's ReLU gradient, which computes it again from the kept
convolution output (``liveness.LivenessWalker.duplicated``).
"""

from __future__ import annotations

from math import prod

from jaxlib.mlir import ir

# Ops XLA's ``InstructionFusion::IsExpensive`` calls expensive among those the
# model fuses (float division and remainder included; sine, cosine and tan of
# reals are cheap there).
_EXPENSIVE = frozenset("stablehlo." + n for n in (
    "exponential", "exponential_minus_one", "log", "log_plus_one", "logistic", "power",
    "rsqrt", "sqrt", "cbrt", "tanh", "atan2", "reduce", "acos", "acosh", "asin", "asinh",
    "atanh", "cosh", "erf", "gather")) | frozenset({"chlo.erf", "chlo.erf_inv", "chlo.acos",
                                           "chlo.acosh", "chlo.asin", "chlo.asinh",
                                           "chlo.atanh", "chlo.cosh", "chlo.lgamma",
                                           "chlo.digamma"})
_FLOAT_EXPENSIVE = frozenset({"stablehlo.divide", "stablehlo.remainder"})
# operands that do not count as a large input of a producer
_SMALL_OPERANDS = frozenset({"stablehlo.broadcast_in_dim", "stablehlo.iota",
                             "stablehlo.constant", "sdy.constant"})


def cheap_to_duplicate(walker, op: int) -> bool:
    """Whether fusible ``op`` reads at most one large operand or no more elements than
    it writes: XLA duplicates it into every consumer that can fuse it."""
    graph = walker.graph
    return _at_most_unary(graph, walker, op) or not _reads_more_than_writes(graph, walker, op)


def _true_rank(shape) -> int:
    return sum(1 for d in shape or () if d != 1)


def _at_most_unary(graph, walker, op: int) -> bool:
    rank = _true_rank(graph.value_shape[graph.op_results[op][0]])
    large = 0
    for operand in set(graph.op_operands[op]):
        owner = graph.value_def[walker.root(operand)]
        if owner >= 0 and graph.op_name[owner] in _SMALL_OPERANDS:
            continue
        if _true_rank(graph.value_shape[operand]) >= rank:
            large += 1
    return large <= 1


def _elements(graph, value: int) -> int:
    shape = graph.value_shape[value]
    return prod(shape) if shape is not None else 0


def _reads_more_than_writes(graph, walker, op: int) -> bool:
    read = sum(_elements(graph, v) for v in {walker.root(o) for o in graph.op_operands[op]})
    return read > sum(_elements(graph, r) for r in graph.op_results[op])


def expensive(graph, op: int) -> bool:
    """Whether XLA calls ``op`` expensive (it never duplicates it)."""
    name = graph.op_name[op]
    if name in _EXPENSIVE:
        return True
    if name in _FLOAT_EXPENSIVE:
        element = ir.ShapedType(graph.values[graph.op_results[op][0]].type).element_type
        return not isinstance(element, ir.IntegerType)
    return False
