"""Rules for ``stablehlo.custom_call``, chosen by ``call_target_name``.

Targets JAX emits for linear algebra and host offloading have rules; targets
that wrap opaque user code get no rule on purpose; any other target warns once
(in ``rules.rule_for``) and gets no rule, as in Shardy.
"""

from __future__ import annotations

from collections.abc import Callable

from jaxlib.mlir import ir

from shardc.compiler.sharding.builder import RuleBuilder, shape_of
from shardc.compiler.sharding.rule import FactorKind, OpShardingRule
from shardc.compiler.sharding.rules._attrs import str_attr
from shardc.compiler.sharding.rules.shape import pointwise_unless_resized, resized_dims_rule

_PT, _NR = FactorKind.PASS_THROUGH, FactorKind.NEED_REPLICATION

# Targets that wrap code the compiler cannot see into: no rule, no warning.
NO_RULE_TARGETS = frozenset({
    "sdy_testonly",
    "tpu_custom_call",
    "xla.debug.Log",
    "xla_ffi_python_cpu_callback",
    "xla_ffi_python_gpu_callback",
    "xla_python_cpu_callback",
    "xla_python_gpu_callback",
})

POINTWISE_TARGETS = frozenset({
    "_SPMDInternalOp_MultiPad",
    "_SPMDInternalOp_MultiRotate",
    "_SPMDInternalOp_MultiSlice",
    "_SPMDInternalOp_RotateRight",
    "_SPMDInternalOp_Wrap",
    "annotate_device_placement",
    "Cholesky",
    "CompactWyHelper",
    "InspectSharding",
    "InvertDiagBlocksLowerTriangular",
    "InvertDiagBlocksUpperTriangular",
    "LayoutConstraint",
    "mhlo.erf",
    "MoveToDevice",
    "MoveToHost",
    "X64SplitHigh",
    "X64SplitLow",
    "xla.megascale.provide_metadata",
})


def target_name(op: ir.Operation) -> str:
    """The custom call's ``call_target_name``."""
    return str_attr(op, "call_target_name")


def eigh(op: ir.Operation) -> OpShardingRule:
    """``([b, i, j])->([b, i, j], [b, j])``: eigenvalues follow the last input dim."""
    shape = shape_of(op.operands[0])
    r = len(shape)
    return (
        RuleBuilder.for_op(op)
        .add_pointwise(shape[:-2])
        .add_factor(r - 2, [r - 2, None], shape[r - 2])
        .add_factor(r - 1, [r - 1, r - 2], shape[r - 1])
        .build()
    )


def qr(op: ir.Operation) -> OpShardingRule:
    """``([b, i, j])->([b, i, j], [b, k])`` need_replication={i, j, k}."""
    shape = shape_of(op.operands[0])
    r = len(shape)
    taus_last = len(shape_of(op.results[1])) - 1
    return (
        RuleBuilder.for_op(op)
        .add_pointwise(shape[:-2])
        .add_factor(r - 2, [r - 2, None], shape[r - 2], _NR)
        .add_factor(r - 1, [r - 1, None], shape[r - 1], _NR)
        .add_factor(None, [None, taus_last], shape_of(op.results[1])[taus_last], _NR)
        .build()
    )


def householder_product(op: ir.Operation) -> OpShardingRule:
    """``([b, i, j], [b, k])->([b, i, j])`` need_replication={i, j, k}."""
    shape, taus = shape_of(op.operands[0]), shape_of(op.operands[1])
    r = len(shape)
    return (
        RuleBuilder.for_op(op)
        .add_pointwise(shape[:-2])
        .add_factor([r - 2, None], r - 2, shape[r - 2], _NR)
        .add_factor([r - 1, None], r - 1, shape[r - 1], _NR)
        .add_factor([None, len(taus) - 1], None, taus[-1], _NR)
        .build()
    )


def top_k(op: ir.Operation) -> OpShardingRule:
    """``([i, j])->([i, j], [i, j])`` need_replication={j} blocked on the top-k dim."""
    return pointwise_unless_resized(op, _NR, blocked=True)


def approx_top_k(op: ir.Operation) -> OpShardingRule:
    """``([i, j], [i, j], [], [])->([i, k], [i, k])`` need_replication={k} blocked={k}."""

    def split(builder: RuleBuilder, dim: int, in_size: int, out_size: int) -> None:
        builder.add_factor([dim, dim], None, in_size)
        builder.add_factor(None, [dim, dim], out_size, _NR, blocked=True)

    return resized_dims_rule(op, split)


def x64_combine(op: ir.Operation) -> OpShardingRule | None:
    """Pointwise, unless it feeds an rng_bit_generator (then nr and blocked).

    Depends on the op's users, so ``rule_for`` keys its cache on them too.
    """
    if not feeds_rng_bit_generator(op):
        return RuleBuilder.pointwise(op)
    return (
        RuleBuilder.for_op(op)
        .add_pointwise(shape_of(op.results[0]), lambda d: _NR, blocked_if=lambda d: True)
        .build()
    )


def feeds_rng_bit_generator(op: ir.Operation) -> bool:
    """Whether any user of ``op``'s results is a ``stablehlo.rng_bit_generator``."""
    return any(
        use.owner.name == "stablehlo.rng_bit_generator" for r in op.results for use in r.uses
    )


_BY_TARGET: dict[str, Callable[[ir.Operation], OpShardingRule | None]] = {
    "ApproxTopK": approx_top_k,
    "Eigh": eigh,
    "mhlo.topk": top_k,
    "PartialReduce": approx_top_k,
    "ProductOfElementaryHouseholderReflectors": householder_product,
    "Qr": qr,
    "QrDecompositionBlock": qr,
    "X64Combine": x64_combine,
}


def is_known_target(op: ir.Operation) -> bool:
    """Whether the target has a rule or is deliberately rule-less (no warning needed)."""
    name = target_name(op)
    return name in NO_RULE_TARGETS or name in POINTWISE_TARGETS or name in _BY_TARGET


def custom_call(op: ir.Operation, conservative: bool = False) -> OpShardingRule | None:
    """Dispatch on ``call_target_name``; None for opaque or unknown targets."""
    name = target_name(op)
    if name in POINTWISE_TARGETS:
        return RuleBuilder.pointwise(op)
    if name in _BY_TARGET:
        return _BY_TARGET[name](op)
    return None
