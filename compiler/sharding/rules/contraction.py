"""Rules for contractions: dot_general, dot and convolution.

Contracted dims become reduction factors shared by both inputs; batch and free
dims are pass-through factors that reach the result.
"""

from __future__ import annotations

from jaxlib.mlir import ir
from jaxlib.mlir.dialects import stablehlo

from shardc.compiler.sharding.builder import RuleBuilder, shape_of
from shardc.compiler.sharding.rule import FactorKind, OpShardingRule
from shardc.compiler.sharding.rules._attrs import int_attr


def dot_general(op: ir.Operation, conservative: bool = False) -> OpShardingRule:
    """``([b, i, k], [b, k, j])->([b, i, j])`` reduction={k}: batch, lhs, rhs, contracting."""
    dims = stablehlo.DotDimensionNumbers(op.attributes["dot_dimension_numbers"])
    lhs_shape, rhs_shape = shape_of(op.operands[0]), shape_of(op.operands[1])
    lhs_batch, rhs_batch = dims.lhs_batching_dimensions, dims.rhs_batching_dimensions
    lhs_contract, rhs_contract = dims.lhs_contracting_dimensions, dims.rhs_contracting_dimensions
    builder = RuleBuilder.for_op(op)
    out_dim = 0
    for lhs_dim, rhs_dim in zip(lhs_batch, rhs_batch, strict=True):
        builder.add_factor([lhs_dim, rhs_dim], out_dim, lhs_shape[lhs_dim])
        out_dim += 1
    for lhs_dim, size in enumerate(lhs_shape):
        if lhs_dim not in lhs_batch and lhs_dim not in lhs_contract:
            builder.add_factor([lhs_dim, None], out_dim, size)
            out_dim += 1
    for rhs_dim, size in enumerate(rhs_shape):
        if rhs_dim not in rhs_batch and rhs_dim not in rhs_contract:
            builder.add_factor([None, rhs_dim], out_dim, size)
            out_dim += 1
    for lhs_dim, rhs_dim in zip(lhs_contract, rhs_contract, strict=True):
        builder.add_factor([lhs_dim, rhs_dim], None, lhs_shape[lhs_dim], FactorKind.REDUCTION)
    return builder.build()


def dot(op: ir.Operation, conservative: bool = False) -> OpShardingRule:
    """``([i, k], [k, j])->([i, j])`` reduction={k}; vector operands lack the free factor."""
    lhs_shape, rhs_shape = shape_of(op.operands[0]), shape_of(op.operands[1])
    lhs_is_matrix, rhs_is_matrix = len(lhs_shape) == 2, len(rhs_shape) == 2
    builder = RuleBuilder.for_op(op)
    if lhs_is_matrix:
        builder.add_factor([0, None], 0, lhs_shape[0])
    if rhs_is_matrix:
        builder.add_factor([None, 1], 1 if lhs_is_matrix else 0, rhs_shape[1])
    builder.add_factor(
        [1 if lhs_is_matrix else 0, 0], None, rhs_shape[0], FactorKind.REDUCTION
    )
    return builder.build()


def _add_spatial_factors(
    builder: RuleBuilder, lhs_dim: int, rhs_dim: int, out_dim: int, sizes: tuple[int, int, int]
) -> None:
    # An input spatial dim splits into (number of windows, window size); the
    # larger of the two goes major so it is the one the input sharding feeds.
    lhs_size, window_size, num_windows = sizes
    remaining = lhs_size

    def add(size: int, *, to_rhs: bool) -> None:
        nonlocal remaining
        size = min(remaining, size)
        if size > 1:
            if to_rhs:
                builder.add_factor([lhs_dim, rhs_dim], None, size, FactorKind.REDUCTION)
            else:
                builder.add_factor([lhs_dim, None], out_dim, size, FactorKind.PERMUTATION)
            remaining //= size

    if num_windows >= window_size:
        add(num_windows, to_rhs=False)
        add(window_size, to_rhs=True)
    else:
        add(window_size, to_rhs=True)
        add(num_windows, to_rhs=False)


def _add_group_factor(
    builder: RuleBuilder, dims: stablehlo.ConvDimensionNumbers, input_dim: int, groups: int
) -> None:
    """A factor of ``groups`` on ``input_dim`` and the kernel's and result's output features."""
    if groups > 1:
        builder.add_factor(
            [input_dim, dims.kernel_output_feature_dimension],
            dims.output_feature_dimension,
            groups,
        )


def convolution(op: ir.Operation, conservative: bool = False) -> OpShardingRule:
    """``([i, jk, n], [k, n, o])->([i, j, o])`` reduction={k, n} permutation={j}.

    Batch groups, batch, spatial (window count / window size; skipped when
    conservative), feature groups, input feature (reduction), output feature.
    """
    dims = stablehlo.ConvDimensionNumbers(op.attributes["dimension_numbers"])
    lhs_shape, rhs_shape = shape_of(op.operands[0]), shape_of(op.operands[1])
    out_shape = shape_of(op.results[0])
    batch_groups = int_attr(op, "batch_group_count", 1)
    feature_groups = int_attr(op, "feature_group_count", 1)
    builder = RuleBuilder.for_op(op)
    _add_group_factor(builder, dims, dims.input_batch_dimension, batch_groups)
    builder.add_factor(
        [dims.input_batch_dimension, None],
        dims.output_batch_dimension,
        out_shape[dims.output_batch_dimension],
    )
    if not conservative:
        for lhs_dim, rhs_dim, out_dim in zip(
            dims.input_spatial_dimensions,
            dims.kernel_spatial_dimensions,
            dims.output_spatial_dimensions,
            strict=True,
        ):
            sizes = (lhs_shape[lhs_dim], rhs_shape[rhs_dim], out_shape[out_dim])
            _add_spatial_factors(builder, lhs_dim, rhs_dim, out_dim, sizes)
    _add_group_factor(builder, dims, dims.input_feature_dimension, feature_groups)
    builder.add_factor(
        [dims.input_feature_dimension, dims.kernel_input_feature_dimension],
        None,
        rhs_shape[dims.kernel_input_feature_dimension],
        FactorKind.REDUCTION,
    )
    out_features = out_shape[dims.output_feature_dimension] // (batch_groups * feature_groups)
    if out_features > 1:
        builder.add_factor(
            [None, dims.kernel_output_feature_dimension],
            dims.output_feature_dimension,
            out_features,
        )
    return builder.build()
