"""Rules for the collectives that change a dim: all_gather, reduce_scatter, all_to_all.

all_reduce and collective_permute are plain pointwise (see ``elementwise``).
The gathered / scattered / split / concatenated dim gets an operand-only and a
result-only need-replication factor, since its size differs on the two sides.
"""

from __future__ import annotations

from jaxlib.mlir import ir

from shardc.compiler.sharding.builder import RuleBuilder, shape_of
from shardc.compiler.sharding.rule import FactorKind, OpShardingRule
from shardc.compiler.sharding.rules._attrs import int_attr


def _pointwise_except(op: ir.Operation, changed_dims: list[int]) -> OpShardingRule:
    """Pointwise over the unchanged dims first; then each dim of ``changed_dims``, in
    order, gets an operand-only and a result-only need-replication factor."""
    num_tensors = len(op.results)
    in_shape, out_shape = shape_of(op.operands[0]), shape_of(op.results[0])
    builder = RuleBuilder.for_op(op).add_pointwise_if(in_shape, lambda d: d not in changed_dims)
    for dim in changed_dims:
        nr = FactorKind.NEED_REPLICATION
        builder.add_factor([dim] * num_tensors, None, in_shape[dim], nr)
        builder.add_factor(None, [dim] * num_tensors, out_shape[dim], nr)
    return builder.build()


def all_gather(op: ir.Operation, conservative: bool = False) -> OpShardingRule:
    """``([i, j])->([i, k])`` need_replication={j, k} on the gather dim."""
    return _pointwise_except(op, [int_attr(op, "all_gather_dim")])


def reduce_scatter(op: ir.Operation, conservative: bool = False) -> OpShardingRule:
    """``([i, j])->([i, k])`` need_replication={j, k} on the scatter dim."""
    return _pointwise_except(op, [int_attr(op, "scatter_dimension")])


def all_to_all(op: ir.Operation, conservative: bool = False) -> OpShardingRule:
    """``([i, j])->([k, l])`` need_replication on the split and concat dims."""
    split, concat = int_attr(op, "split_dimension"), int_attr(op, "concat_dimension")
    return _pointwise_except(op, [split] if split == concat else [split, concat])
