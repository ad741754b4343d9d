"""Insert ``sdy.reshard`` where an op's operand shardings conflict with its result
(the non-full ``sdy-insert-explicit-reshards``, for the cases below)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from jaxlib.mlir import ir

from shardc.compiler.passes.base import ModulePass
from shardc.compiler.propagation.explicit_reshards import (
    DOTS,
    OperandReshard,
    ResultReshard,
    plan_concatenate,
    plan_dot,
)
from shardc.compiler.propagation.values import ModuleValues
from shardc.compiler.sharding.tensor import format_per_value, format_sharding
from shardc.dialects import sdy
from shardc.dialects.sdy import SHARDING_ATTR


def _attr(text: str, context: ir.Context) -> ir.Attribute:
    return ir.Attribute.parse(text, context)


def _apply(edit: OperandReshard | ResultReshard) -> None:
    op, context = edit.op, edit.op.context
    if isinstance(edit, OperandReshard):
        target = _attr(format_sharding(edit.sharding), context)
        reshard = sdy.ReshardOp(op.operands[edit.index], target,
                                ip=ir.InsertionPoint(op), loc=op.location)
        op.operands[edit.index] = reshard.result
        return
    op.attributes[SHARDING_ATTR] = _attr(format_per_value([edit.computed]), context)
    reshard = sdy.ReshardOp(op.results[0], _attr(format_sharding(edit.wanted), context),
                            ip=ir.InsertionPoint.after(op), loc=op.location)
    op.results[0].replace_all_uses_except(reshard.result, reshard.operation)


def insert_explicit_reshards(module: ir.Operation) -> int:
    """Insert the reshards; return how many were inserted."""
    values = ModuleValues(module.operation)
    edits: list[OperandReshard | ResultReshard] = []
    for op, name in enumerate(values.graph.op_name):
        if name == "stablehlo.concatenate":
            edits += plan_concatenate(values, op)
        elif name in DOTS:
            edits += plan_dot(values, op)
    with module.context:
        for edit in edits:
            _apply(edit)
    return len(edits)


@dataclass(frozen=True)
class InsertExplicitReshardsPass(ModulePass):
    """Make conflicting operand/result shardings explicit with sdy.reshard

    Reads the shardings of every op (run after propagation). Where a
    concatenate's operands are sharded otherwise than its result (and the
    result leaves the concatenated dimension unsharded), each such operand
    is resharded to the result sharding; where a dot/dot_general result
    conflicts with operands that agree, on one factor whose result axis is a
    reduction axis, the dot gets the operands' sharding and an sdy.reshard
    restores the old result sharding for its users (Shardy's rule). The op
    itself then needs no implicit communication. Other conflicts are left
    to XLA (Shardy's full version handles every op). Matches jaxlib's native
    pass on those cases.
    """

    name: ClassVar[str] = "shardc-insert-explicit-reshards"
    needs_mesh_symbols: ClassVar[bool] = True
    aliases: ClassVar[tuple[str, ...]] = ("sdy-insert-explicit-reshards",)
    upstream: ClassVar[str] = "sdy-insert-explicit-reshards"

    def run(self, module: ir.Operation) -> None:
        """Insert the reshards of ``module``."""
        insert_explicit_reshards(module)
