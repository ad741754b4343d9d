"""Rules for reductions, windowed ops and sorting: reduce, reduce_window,
select_and_scatter, sort, top_k.

Reduced dims are reduction factors of the inputs only; kept dims pass through.
Windowed dims are permutation factors sized by the number of windows.
"""

from __future__ import annotations

from jaxlib.mlir import ir

from shardc.compiler.sharding.builder import RuleBuilder, shape_of
from shardc.compiler.sharding.rule import FactorKind, OpShardingRule
from shardc.compiler.sharding.rules._attrs import i64_list, int_attr


def reduce(op: ir.Operation, conservative: bool = False) -> OpShardingRule:
    """``([i, j], [i, j], [], [])->([i], [i])`` reduction={j}: all inputs share factors."""
    num_inputs = len(op.results)
    reduced = set(i64_list(op, "dimensions"))
    builder = RuleBuilder.for_op(op)
    out_dim = 0
    for in_dim, size in enumerate(shape_of(op.operands[0])):
        operand_dims = [in_dim] * num_inputs  # The inits are scalars: unmapped.
        if in_dim in reduced:
            builder.add_factor(operand_dims, None, size, FactorKind.REDUCTION)
        else:
            builder.add_factor(operand_dims, [out_dim] * num_inputs, size)
            out_dim += 1
    return builder.build()


def _trivial_window_dims(op: ir.Operation, rank: int) -> list[bool]:
    """Per dim: window size 1, stride 1 and no padding (the dim maps one-to-one)."""
    windows = i64_list(op, "window_dimensions") or [1] * rank
    strides = i64_list(op, "window_strides") or [1] * rank
    padding = i64_list(op, "padding") or [0] * (2 * rank)
    return [
        windows[d] == 1 and strides[d] == 1 and padding[2 * d] == 0 and padding[2 * d + 1] == 0
        for d in range(rank)
    ]


def reduce_window(op: ir.Operation, conservative: bool = False) -> OpShardingRule:
    """``([i, j], [])->([i, j])`` permutation={j} on windowed dims, sized by the result."""
    out_shape = shape_of(op.results[0])
    trivial = _trivial_window_dims(op, len(out_shape))
    return (
        RuleBuilder.for_op(op)
        .add_pointwise(
            out_shape,
            lambda d: FactorKind.PASS_THROUGH if trivial[d] else FactorKind.PERMUTATION,
            blocked_if=lambda d: conservative and not trivial[d],
        )
        .build()
    )


def select_and_scatter(op: ir.Operation, conservative: bool = False) -> OpShardingRule:
    """``([ij], [i], [])->([ij])``-like: windowed dims split into source-only nr and perm."""
    operand_shape, source_shape = shape_of(op.operands[0]), shape_of(op.operands[1])
    trivial = _trivial_window_dims(op, len(operand_shape))
    builder = RuleBuilder.for_op(op)
    for dim, size in enumerate(operand_shape):
        if trivial[dim]:
            builder.add_factor([dim, dim], dim, size)
        else:
            builder.add_factor(
                [None, dim], None, source_shape[dim], FactorKind.NEED_REPLICATION,
                blocked=conservative,
            )
            builder.add_factor([dim, None], dim, size, FactorKind.PERMUTATION, blocked=conservative)
    return builder.build()


def sort(op: ir.Operation, conservative: bool = False) -> OpShardingRule:
    """``([i, j], [i, j])->([i, j], [i, j])`` need_replication={j} on the sort dim."""
    shape = shape_of(op.operands[0])
    sort_dim = int_attr(op, "dimension", -1) % max(len(shape), 1)
    only_sort_dim = all(size == 1 for d, size in enumerate(shape) if d != sort_dim)
    return (
        RuleBuilder.for_op(op)
        .add_pointwise(
            shape,
            lambda d: FactorKind.NEED_REPLICATION if d == sort_dim else FactorKind.PASS_THROUGH,
            blocked_if=lambda d: d == sort_dim and only_sort_dim,
        )
        .build()
    )


def top_k(op: ir.Operation, conservative: bool = False) -> OpShardingRule:
    """``([b, n])->([b, k], [b, k])`` need_replication={n, k}: batch dims pass through.

    ``chlo.top_k`` is what XLA decomposes into a sort of the last dim and a
    slice of its first ``k`` elements, which is how Shardy sees it inside
    ``jax.jit``: the rule of that decomposition, as one op.
    """
    shape = shape_of(op.operands[0])
    last = len(shape) - 1
    k = shape_of(op.results[0])[last]
    return (
        RuleBuilder.for_op(op)
        .add_pointwise(shape[:last])
        .add_factor(last, None, shape[last], FactorKind.NEED_REPLICATION)
        .add_factor(None, [last, last], k, FactorKind.NEED_REPLICATION)
        .build()
    )
