"""Put a commutative op's constant operand last, as XLA's conversion to HLO does.

On its way to HLO, XLA canonicalizes jax's module: a splat constant broadcast
(jax's ``0.1 * x`` lowers to ``multiply(broadcast_in_dim(0.1), x)``) folds to
a constant, and MLIR's fold of a commutative op moves constant operands after
the others (``OpTrait::IsCommutative``), so XLA's Shardy reads ``multiply(x,
0.1)``, and the HLO post-order (``hlo_order``) visits ``x``'s producers before
the constant's broadcast. An elementwise op's operand order decides which of
two conflicting shardings its step keeps, and the post-order decides which op
propagation reaches first, so ``jit`` swaps the operands as XLA does.
"""

from __future__ import annotations

from jaxlib.mlir import ir

# StableHLO's binary ops with MLIR's Commutative trait.
COMMUTATIVE = frozenset({
    "stablehlo.add", "stablehlo.multiply", "stablehlo.maximum", "stablehlo.minimum",
    "stablehlo.and", "stablehlo.or", "stablehlo.xor",
})
_CONSTANTS = frozenset({"stablehlo.constant", "sdy.constant"})
# Ops whose fold of a splat constant is a splat constant.
_SPLAT_PRESERVING = frozenset({"stablehlo.broadcast_in_dim", "stablehlo.reshape",
                               "stablehlo.convert"})


def put_constants_last(ops: list[ir.Operation]) -> int:
    """Swap the operands of each commutative op of ``ops`` whose first operand folds to a
    constant and second does not; returns how many were swapped."""
    swapped = 0
    for op in ops:
        lhs, rhs = op.operands
        if _folds_to_constant(lhs) and not _folds_to_constant(rhs):
            op.operands[0], op.operands[1] = rhs, lhs
            swapped += 1
    return swapped


def _folds_to_constant(value: ir.Value) -> bool:
    """Whether ``value`` is a constant, or a broadcast, reshape or convert of a splat one
    (those fold to a constant)."""
    owner = value.owner
    if isinstance(owner, ir.Block):
        return False
    op = owner.operation if hasattr(owner, "operation") else owner
    name = op.name
    if name in _CONSTANTS:
        return True
    while name in _SPLAT_PRESERVING:
        source = op.operands[0].owner
        if isinstance(source, ir.Block):
            return False
        op = source.operation if hasattr(source, "operation") else source
        name = op.name
    return name in _CONSTANTS and _splat(op)


def _splat(constant: ir.Operation) -> bool:
    try:
        return ir.DenseElementsAttr(constant.attributes["value"]).is_splat
    except (KeyError, ValueError, TypeError):
        return False
