"""Fold shape ops that return their operand unchanged, as XLA does when it imports a module.

jax.jit hands XLA a StableHLO module; XLA converts it to HLO, folding on the way
every slice of the whole operand, zero padding, same-type reshape, convert or
broadcast, identity transpose, empty reverse and one-operand concatenate, and
only then runs Shardy. Those ops connect values that propagation would
otherwise treat apart (a result that *is* an argument takes the argument's
sharding), so ``jit`` folds them first and propagates what XLA's Shardy sees.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar

from jaxlib.mlir import ir

from shardc.compiler.pass_base import ModulePass

SHARDING = "sdy.sharding"


def _ints(op: ir.Operation, name: str) -> list[int]:
    return [int(v) for v in ir.DenseI64ArrayAttr(op.attributes[name])] \
        if name in op.attributes else []


def _same_type(op: ir.Operation) -> bool:
    return op.operands[0].type == op.results[0].type


def _full_slice(op: ir.Operation) -> bool:
    shape = ir.RankedTensorType(op.operands[0].type).shape
    return (_same_type(op) and all(s == 0 for s in _ints(op, "start_indices"))
            and _ints(op, "limit_indices") == list(shape)
            and all(s == 1 for s in _ints(op, "strides")))


def _zero_pad(op: ir.Operation) -> bool:
    return _same_type(op) and not any(
        _ints(op, name) and any(_ints(op, name))
        for name in ("edge_padding_low", "edge_padding_high", "interior_padding"))


def _identity_transpose(op: ir.Operation) -> bool:
    return _same_type(op) and _ints(op, "permutation") == list(
        range(len(_ints(op, "permutation"))))


def _identity_broadcast(op: ir.Operation) -> bool:
    return _same_type(op) and _ints(op, "broadcast_dimensions") == list(
        range(ir.RankedTensorType(op.operands[0].type).rank))


def _empty_reverse(op: ir.Operation) -> bool:
    return _same_type(op) and not _ints(op, "dimensions")


def _single_concatenate(op: ir.Operation) -> bool:
    return len(op.operands) == 1 and _same_type(op)


#: Op name -> when the op returns its first operand unchanged.
IDENTITIES: dict[str, Callable[[ir.Operation], bool]] = {
    "stablehlo.slice": _full_slice,
    "stablehlo.pad": _zero_pad,
    "stablehlo.reshape": _same_type,
    "stablehlo.convert": _same_type,
    "stablehlo.transpose": _identity_transpose,
    "stablehlo.broadcast_in_dim": _identity_broadcast,
    "stablehlo.reverse": _empty_reverse,
    "stablehlo.concatenate": _single_concatenate,
}


def fold_identities(module: ir.Operation) -> int:
    """Replace every identity shape op of ``module`` (without a sharding of its own) by
    its operand; return how many were folded."""
    found: list[ir.Operation] = []

    def visit(op: ir.Operation) -> ir.WalkResult:
        rule = IDENTITIES.get(op.name)
        if rule is not None and SHARDING not in op.attributes and rule(op):
            found.append(op)
        return ir.WalkResult.ADVANCE

    module.walk(visit)
    for op in found:
        op.results[0].replace_all_uses_with(op.operands[0])
        op.erase()
    return len(found)


@dataclass(frozen=True)
class FoldIdentitiesPass(ModulePass):
    """Fold shape ops that return their operand unchanged, as XLA's import does

    Folds a slice of the whole operand with unit strides, a pad of zeros, a
    same-type reshape or convert, an identity transpose or broadcast_in_dim,
    a reverse of no dimension and a one-operand concatenate: their uses take
    the operand. Ops carrying a sharding of their own are kept. ``jit`` runs
    this before propagation so that propagation sees the module XLA's own
    Shardy sees (XLA folds these when it converts StableHLO to HLO).
    """

    name: ClassVar[str] = "shardc-fold-identities"

    def run(self, module: ir.Operation) -> None:
        """Fold the identity shape ops of ``module``."""
        fold_identities(module)
