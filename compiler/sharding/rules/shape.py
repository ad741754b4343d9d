"""Rules for ops that move data between dims: broadcast_in_dim, reshape, transpose,
reverse, concatenate, pad and slice (plus the resized-dims helpers
dynamic_slice and approx_top_k share).

Dims that keep their size share a pass-through factor; dims whose size changes
get a permutation or need-replication factor (blocked in conservative mode),
and reshape splits dims into compound factors.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from jaxlib.mlir import ir

from shardc.compiler.sharding.builder import RuleBuilder, shape_of
from shardc.compiler.sharding.rule import FactorKind, OpShardingRule
from shardc.compiler.sharding.rules._attrs import defining_op_name, i64_list, int_attr


def broadcast_in_dim(op: ir.Operation, conservative: bool = False) -> OpShardingRule:
    """``([j])->([i, j])``; an expanded size-1 operand dim gets its own size-1 factor."""
    in_shape, out_shape = shape_of(op.operands[0]), shape_of(op.results[0])
    out_to_in: dict[int, int] = {
        out_dim: in_dim for in_dim, out_dim in enumerate(i64_list(op, "broadcast_dimensions"))
    }
    builder = RuleBuilder.for_op(op)
    for out_dim, out_size in enumerate(out_shape):
        in_dim = out_to_in.get(out_dim)
        if in_dim is not None and in_shape[in_dim] == 1 and out_size != 1:
            # The operand dim is expanded in place, so it cannot share the factor.
            builder.add_factor(in_dim, None, 1)
            in_dim = None
        builder.add_factor(in_dim, out_dim, out_size)
    return builder.build()


def transpose(op: ir.Operation, conservative: bool = False) -> OpShardingRule:
    """``([i, j])->([j, i])``: result dim d shares a factor with operand dim perm[d]."""
    in_shape = shape_of(op.operands[0])
    builder = RuleBuilder.for_op(op)
    for out_dim, in_dim in enumerate(i64_list(op, "permutation")):
        builder.add_factor(in_dim, out_dim, in_shape[in_dim])
    return builder.build()


def reverse(op: ir.Operation, conservative: bool = False) -> OpShardingRule:
    """``([i, j])->([i, j])`` permutation on the reversed dims."""
    reversed_dims = set(i64_list(op, "dimensions"))
    return (
        RuleBuilder.for_op(op)
        .add_pointwise(
            shape_of(op.results[0]),
            lambda d: FactorKind.PERMUTATION if d in reversed_dims else FactorKind.PASS_THROUGH,
        )
        .build()
    )


def _next_factor_if_diverged(next_factor: int, smaller: int, larger: int, gcd: int) -> int:
    # Prefer the factor that makes both sides' products meet again; otherwise
    # keep the gcd available for the next step.
    if larger % smaller == 0 and next_factor % (larger // smaller) == 0:
        return larger // smaller
    if next_factor > gcd:
        return next_factor // gcd
    return next_factor


def reshape(op: ir.Operation, conservative: bool = False) -> OpShardingRule | None:
    """``([ij, k])->([i, jk])`` for 8x4->2x16: dims split into compound factors."""
    in_shape, out_shape = shape_of(op.operands[0]), shape_of(op.results[0])
    if math.prod(in_shape) == 0:
        return None  # Nothing to propagate through a tensor without elements.
    builder = RuleBuilder.for_op(op)
    in_dim = out_dim = 0
    dims_in = dims_out = facs_in = facs_out = 1
    while in_dim < len(in_shape) or out_dim < len(out_shape):
        if in_dim < len(in_shape) and in_shape[in_dim] == 1:
            builder.add_factor(in_dim, None, 1)
            in_dim += 1
            continue
        if out_dim < len(out_shape) and out_shape[out_dim] == 1:
            builder.add_factor(None, out_dim, 1)
            out_dim += 1
            continue
        if in_dim < len(in_shape) and dims_in == facs_in:
            dims_in *= in_shape[in_dim]
        if out_dim < len(out_shape) and dims_out == facs_out:
            dims_out *= out_shape[out_dim]
        next_in, next_out = dims_in // facs_in, dims_out // facs_out
        gcd = math.gcd(next_in, next_out)
        if facs_in == facs_out:
            if gcd > 1:
                builder.add_factor(in_dim, out_dim, gcd)
                facs_in *= gcd
                facs_out *= gcd
            else:
                builder.add_factor(in_dim, None, next_in)
                facs_in *= next_in
                builder.add_factor(None, out_dim, next_out)
                facs_out *= next_out
        elif facs_in < facs_out:
            next_in = _next_factor_if_diverged(next_in, facs_in, facs_out, gcd)
            builder.add_factor(in_dim, None, next_in)
            facs_in *= next_in
        else:
            next_out = _next_factor_if_diverged(next_out, facs_out, facs_in, gcd)
            builder.add_factor(None, out_dim, next_out)
            facs_out *= next_out
        if in_dim < len(in_shape) and dims_in == facs_in:
            in_dim += 1
        if out_dim < len(out_shape) and dims_out == facs_out:
            out_dim += 1
    return builder.build()


def _is_slice_of_common_source(operands: list[ir.Value]) -> bool:
    """All operands are slices, or each is ``x`` or ``slice(x)`` of one ``x`` (a slice at least)."""
    defining = [defining_op_name(v) for v in operands]
    if all(name == "stablehlo.slice" for name in defining):
        return True
    sources = {
        v.owner.operands[0] if name == "stablehlo.slice" else v
        for v, name in zip(operands, defining, strict=True)
    }
    return len(sources) == 1 and "stablehlo.slice" in defining


def concatenate(op: ir.Operation, conservative: bool = False) -> OpShardingRule:
    """``([i, j], [i, k])->([i, l])`` pointwise over the result; the concat dim is nr or perm.

    The concat dim is a permutation when its operands are slices (of one tensor),
    need-replication otherwise; in conservative mode it gets no shared factor.
    """
    concat_dim = int_attr(op, "dimension")
    concat_kind = (
        FactorKind.PERMUTATION
        if _is_slice_of_common_source(list(op.operands))
        else FactorKind.NEED_REPLICATION
    )
    return (
        RuleBuilder.for_op(op)
        .add_pointwise_if(
            shape_of(op.results[0]),
            lambda d: not conservative or d != concat_dim,
            lambda d: concat_kind if d == concat_dim else FactorKind.PASS_THROUGH,
        )
        .build()
    )


def pointwise_unless_resized(
    op: ir.Operation, kind: FactorKind, *, blocked: bool
) -> OpShardingRule:
    """Pointwise on equal-size dims; resized dims get a ``kind`` factor of the operand size."""
    return resized_dims_rule(
        op, lambda builder, dim, in_size, _: builder.add_factor_to_all(
            dim, in_size, kind, blocked=blocked))


def resized_dims_rule(
    op: ir.Operation, add_resized: Callable[[RuleBuilder, int, int, int], object]
) -> OpShardingRule:
    """Pointwise on equal-size dims; ``add_resized`` adds the factors of each resized dim.

    It is called as ``add_resized(builder, dim, in_size, out_size)``.
    """
    in_shape, out_shape = shape_of(op.operands[0]), shape_of(op.results[0])
    builder = RuleBuilder.for_op(op)
    for dim, (in_size, out_size) in enumerate(zip(in_shape, out_shape, strict=True)):
        if in_size == out_size:
            builder.add_factor_to_all(dim, in_size)
        else:
            add_resized(builder, dim, in_size, out_size)
    return builder.build()


def pad(op: ir.Operation, conservative: bool = False) -> OpShardingRule:
    """``([i, j], [])->([i, j])`` permutation={j} on padded dims (blocked if conservative)."""
    return pointwise_unless_resized(op, FactorKind.PERMUTATION, blocked=conservative)


def slice(op: ir.Operation, conservative: bool = False) -> OpShardingRule:  # noqa: A001
    """``([i, j])->([i, j])`` permutation={j} on sliced dims (blocked if conservative)."""
    return pointwise_unless_resized(op, FactorKind.PERMUTATION, blocked=conservative)
