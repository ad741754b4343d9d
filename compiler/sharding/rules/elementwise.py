"""Rules for elementwise ops: the POINTWISE_OPS list plus select, clamp and bitcast_convert.

Every dimension of every non-scalar tensor shares one pass-through factor per
result dimension, ``([i, j], [i, j])->([i, j])``.
"""

from __future__ import annotations

from jaxlib.mlir import ir

from shardc.compiler.sharding.builder import RuleBuilder, shape_of
from shardc.compiler.sharding.rule import FactorKind, OpShardingRule

# Ops whose rule is ``pointwise``; alphabetical. Some collectives and
# sdy.sharding_constraint are pointwise for propagation's sake too.
POINTWISE_OPS: tuple[str, ...] = (
    "sdy.sharding_constraint",
    "stablehlo.abs",
    "stablehlo.add",
    "stablehlo.all_reduce",
    "stablehlo.and",
    "stablehlo.atan2",
    "stablehlo.cbrt",
    "stablehlo.ceil",
    "stablehlo.collective_broadcast",
    "stablehlo.collective_permute",
    "stablehlo.compare",
    "stablehlo.complex",
    "stablehlo.convert",
    "stablehlo.cosine",
    "stablehlo.count_leading_zeros",
    "stablehlo.cross-replica-sum",
    "stablehlo.divide",
    "stablehlo.exponential",
    "stablehlo.exponential_minus_one",
    "stablehlo.floor",
    "stablehlo.imag",
    "stablehlo.is_finite",
    "stablehlo.log",
    "stablehlo.log_plus_one",
    "stablehlo.logistic",
    "stablehlo.maximum",
    "stablehlo.minimum",
    "stablehlo.multiply",
    "stablehlo.negate",
    "stablehlo.not",
    "stablehlo.or",
    "stablehlo.popcnt",
    "stablehlo.power",
    "stablehlo.real",
    "stablehlo.reduce_precision",
    "stablehlo.remainder",
    "stablehlo.round_nearest_afz",
    "stablehlo.round_nearest_even",
    "stablehlo.rsqrt",
    "stablehlo.shift_left",
    "stablehlo.shift_right_arithmetic",
    "stablehlo.shift_right_logical",
    "stablehlo.sign",
    "stablehlo.sine",
    "stablehlo.sqrt",
    "stablehlo.subtract",
    "stablehlo.tan",
    "stablehlo.tanh",
    "stablehlo.xor",
)

# CHLO's same-shape elementwise ops; alphabetical. Shardy's registry has no
# rule for them (it warns and stops there), but under jax.jit Shardy never sees
# them: XLA decomposes CHLO into StableHLO elementwise ops before its own
# propagation. shardc propagates before that decomposition, so it gives them
# the pointwise rule their decomposition has; otherwise a `jnp.square` or an
# `erf` in a GELU would stop shardc's propagation where jax.jit's goes on.
# (The chlo.broadcast_* ops broadcast implicitly and are not listed.)
CHLO_POINTWISE_OPS: tuple[str, ...] = tuple(
    f"chlo.{name}"
    for name in (
        "acos", "acosh", "asin", "asinh", "atan", "atanh", "bessel_i1e", "conj", "cosh",
        "digamma", "erf", "erf_inv", "erfc", "is_inf", "is_neg_inf", "is_pos_inf", "lgamma",
        "next_after", "polygamma", "sinh", "square", "tan", "zeta",
    )
)


def pointwise(op: ir.Operation, conservative: bool = False) -> OpShardingRule | None:
    """``([i, j], [i, j])->([i, j])``: one pass-through factor per result dim."""
    return RuleBuilder.pointwise(op)


def select(op: ir.Operation, conservative: bool = False) -> OpShardingRule:
    """``([], [i, j], [i, j])->([i, j])``: pointwise over the result; a scalar pred is unmapped."""
    return RuleBuilder.for_op(op).add_pointwise(shape_of(op.results[0])).build()


def clamp(op: ir.Operation, conservative: bool = False) -> OpShardingRule:
    """``([], [i, j], [])->([i, j])``: pointwise over the operand; scalar bounds unmapped."""
    return RuleBuilder.for_op(op).add_pointwise(shape_of(op.operands[1])).build()


def bitcast_convert(op: ir.Operation, conservative: bool = False) -> OpShardingRule:
    """``([i, j])->([i, j, k])`` need_replication={k}: the extra minor dim is its own factor."""
    in_shape, out_shape = shape_of(op.operands[0]), shape_of(op.results[0])
    builder = RuleBuilder.for_op(op)
    builder.add_pointwise(in_shape if len(in_shape) < len(out_shape) else out_shape)
    if len(in_shape) < len(out_shape):
        builder.add_factor(
            None, len(out_shape) - 1, out_shape[-1], FactorKind.NEED_REPLICATION
        )
    elif len(in_shape) > len(out_shape):
        builder.add_factor(len(in_shape) - 1, None, in_shape[-1], FactorKind.NEED_REPLICATION)
    return builder.build()
