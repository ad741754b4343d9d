"""Fold shape ops that return their operand unchanged, as XLA does when it imports a module.

jax.jit hands XLA a StableHLO module; XLA converts it to HLO, folding on the way
every slice of the whole operand, zero padding, same-type reshape, convert or
broadcast, identity transpose, empty reverse and one-operand concatenate, and
only then runs Shardy. Those ops connect values that propagation would
otherwise treat apart (a result that *is* an argument takes the argument's
sharding), so ``jit`` folds them first and propagates what XLA's Shardy sees.

XLA's import also writes a ``broadcast_in_dim`` that only inserts unit
dimensions (``x[None]``, as jax lowers ``expand_dims``) as the ``reshape`` it
is. Propagation treats the two apart: a broadcast's new dimensions take no
sharding from its operand and its operand's dimensions keep their own factors,
while a reshape shares factors across the whole shape, so the rewrite is made
here too.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from jaxlib.mlir import ir
from jaxlib.mlir.dialects import stablehlo

from shardc.compiler.stages.capture_loop_invariants import LOOP
from shardc.dialects.sdy import SHARDING_ATTR


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


def _reshaping_broadcast(op: ir.Operation) -> bool:
    """A broadcast_in_dim that keeps every element and the order of the dimensions it
    maps: it only inserts unit dimensions."""
    dims = _ints(op, "broadcast_dimensions")
    shapes = (ir.RankedTensorType(v.type).shape for v in (op.operands[0], op.results[0]))
    return bool(dims) and dims == sorted(dims) and math.prod(next(shapes)) == math.prod(
        next(shapes))


#: Op name -> when XLA's import writes the op as a ``stablehlo.reshape``.
RESHAPES: dict[str, Callable[[ir.Operation], bool]] = {
    "stablehlo.broadcast_in_dim": _reshaping_broadcast,
}


def _verdict(op: ir.Operation, name: str) -> str | None:
    """``"identity"`` where ``op`` returns its operand, ``"reshape"`` where it is a
    reshape, else None."""
    identity, reshape = IDENTITIES.get(name), RESHAPES.get(name)
    if identity is not None and identity(op):
        return "identity"
    if reshape is not None and reshape(op):
        return "reshape"
    return None


_BROADCAST = "stablehlo.broadcast_in_dim"


def fold_identities(module: ir.Operation, loops: list[ir.Operation] | None = None,
                    look: Callable[[ir.Operation, str], None] | None = None) -> int:
    """Replace every identity shape op of ``module`` (without a sharding of its own) by
    its operand, and every op that is a reshape by one; return how many changed.

    ``loops``, when given, receives the module's ``stablehlo.while`` ops, inner
    loops first, found by the same walk (``capture_loop_invariants`` rewrites
    them next; folding leaves every loop in place). ``look``, when given, is
    shown every op the walk meets, with its name (a later step's census).
    """
    identities: list[ir.Operation] = []
    reshapes: list[ir.Operation] = []
    # A broadcast is judged by its two types and its dimensions alone, which are
    # uniqued and few in a module (most ops it checks are broadcasts): each
    # distinct broadcast is judged once.
    broadcasts: dict[tuple[ir.Type, ir.Type, ir.Attribute], str | None] = {}

    def visit(op: ir.Operation) -> ir.WalkResult:
        # By name first: most ops are neither, and the name is the cheapest thing to read.
        name = op.name
        if look is not None:
            look(op, name)
        if name in IDENTITIES or name in RESHAPES:
            if name == _BROADCAST:
                key = (op.operands[0].type, op.result.type,
                       op.attributes["broadcast_dimensions"])
                if key not in broadcasts:
                    broadcasts[key] = _verdict(op, name)
                verdict = broadcasts[key]
            else:
                verdict = _verdict(op, name)
            # The sharding last: most of these ops are neither.
            if verdict is not None and SHARDING_ATTR not in op.attributes:
                (identities if verdict == "identity" else reshapes).append(op)
        elif name == LOOP and loops is not None:
            loops.append(op)
        return ir.WalkResult.ADVANCE

    # Post-order, for the loops: the ops folded hold no regions, and those come in
    # the same order either way.
    module.walk(visit, ir.WalkOrder.POST_ORDER)
    for op in identities:
        op.results[0].replace_all_uses_with(op.operands[0])
        op.erase()
    for op in reshapes:
        reshape = stablehlo.ReshapeOp(op.results[0].type, op.operands[0], loc=op.location,
                                      ip=ir.InsertionPoint(op))
        op.results[0].replace_all_uses_with(reshape.result)
        op.erase()
    return len(identities) + len(reshapes)
