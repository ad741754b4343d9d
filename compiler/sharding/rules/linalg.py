"""Rules for linear-algebra and signal ops: cholesky, triangular_solve, fft,
batch_norm_inference and rng_bit_generator.

Leading batch dims are pass-through; the matrix / transform dims need
replication because every output element depends on a whole row or column.
"""

from __future__ import annotations

from jaxlib.mlir import ir
from jaxlib.mlir.dialects import stablehlo

from shardc.compiler.sharding.builder import RuleBuilder, shape_of
from shardc.compiler.sharding.rule import FactorKind, OpShardingRule
from shardc.compiler.sharding.rules._attrs import bool_attr, i64_list, int_attr

_PT, _NR = FactorKind.PASS_THROUGH, FactorKind.NEED_REPLICATION


def cholesky(op: ir.Operation, conservative: bool = False) -> OpShardingRule:
    """``([b, i, j])->([b, i, j])`` need_replication={i, j}: batch dims pass through."""
    shape = shape_of(op.operands[0])
    num_batch = len(shape) - 2
    return (
        RuleBuilder.for_op(op)
        .add_pointwise(shape, lambda d: _PT if d < num_batch else _NR)
        .build()
    )


def triangular_solve(op: ir.Operation, conservative: bool = False) -> OpShardingRule:
    """``([b, i, k], [b, i, j])->([b, k, j])`` (left side) with i, j, k need_replication."""
    a_shape, b_shape = shape_of(op.operands[0]), shape_of(op.operands[1])
    builder = RuleBuilder.for_op(op).add_pointwise(a_shape[:-2])
    dim1, dim2 = len(a_shape) - 2, len(a_shape) - 1
    transpose_a = stablehlo.TransposeAttr(op.attributes["transpose_a"]).value
    a_transposed = transpose_a in ("TRANSPOSE", "ADJOINT")
    if bool_attr(op, "left_side"):
        # op(a) @ result = b
        a_free, a_contract = (dim2, dim1) if a_transposed else (dim1, dim2)
        builder.add_factor([a_free, dim1], None, a_shape[a_free], _NR)
        builder.add_factor([None, dim2], dim2, b_shape[dim2], _NR)
        builder.add_factor([a_contract, None], dim1, a_shape[a_contract], _NR)
    else:
        # result @ op(a) = b
        a_free, a_contract = (dim1, dim2) if a_transposed else (dim2, dim1)
        builder.add_factor([None, dim1], dim1, b_shape[dim1], _NR)
        builder.add_factor([a_free, dim2], None, a_shape[a_free], _NR)
        builder.add_factor([a_contract, None], dim2, a_shape[a_contract], _NR)
    return builder.build()


def fft(op: ir.Operation, conservative: bool = False) -> OpShardingRule:
    """``([b, i, j])->([b, i, j])`` need_replication={i, j}; last dim blocked for rfft/irfft."""
    in_shape, out_shape = shape_of(op.operands[0]), shape_of(op.results[0])
    first_fft_dim = len(in_shape) - len(i64_list(op, "fft_length"))
    last = len(in_shape) - 1
    truncated = in_shape[-1] != out_shape[-1]
    return (
        RuleBuilder.for_op(op)
        .add_pointwise(
            in_shape,
            lambda d: _PT if d < first_fft_dim else _NR,
            blocked_if=lambda d: d == last and truncated,
        )
        .build()
    )


def batch_norm_inference(op: ir.Operation, conservative: bool = False) -> OpShardingRule:
    """``([i, j], [j], [j], [j], [j])->([i, j])`` for feature_index 1."""
    feature = int_attr(op, "feature_index")
    builder = RuleBuilder.for_op(op)
    for dim, size in enumerate(shape_of(op.operands[0])):
        stats_dim = 0 if dim == feature else None
        builder.add_factor([dim] + [stats_dim] * 4, dim, size)
    return builder.build()


def rng_bit_generator(op: ir.Operation, conservative: bool = False) -> OpShardingRule:
    """``([i])->([i], [j, k])`` need_replication={i} blocked={i}: the state is not split."""
    builder = RuleBuilder.for_op(op)
    for dim, size in enumerate(shape_of(op.operands[0])):
        builder.add_factor(dim, [dim, None], size, _NR, blocked=True)
    for dim, size in enumerate(shape_of(op.results[1])):
        builder.add_factor(None, [None, dim], size)
    return builder.build()
