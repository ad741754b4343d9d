"""Rewrites of ``stablehlo.while`` that both the compiler and the runtime make.

XLA does not pass a loop's invariant carries (those its body returns
unchanged) from iteration to iteration: when it imports a module it turns them
into free variables of the loop, read from above in the body, the condition
and after the loop. shardc makes the same rewrite before propagation (so that
propagation sees the module XLA's own Shardy sees) and before handing its
result to XLA (which then says the remaining carries' shardings with
constraints: ``dialects.xla_form``).
"""

from __future__ import annotations

from jaxlib.mlir import ir

from shardc.dialects import sdy
from shardc.dialects.sdy import SHARDING_ATTR


def invariant_carries(loop: ir.Operation) -> list[int]:
    """The carries of a ``stablehlo.while`` its body returns unchanged: its own block
    argument, or the very value the loop was given."""
    body = loop.regions[1].blocks[0]
    returned = terminator(body).operands
    return [k for k in range(len(loop.operands))
            if returned[k] == body.arguments[k] or returned[k] == loop.operands[k]]


def hoist_invariant_carries(loop: ir.Operation) -> ir.Operation:
    """Rebuild a ``stablehlo.while`` without its invariant carries.

    Inside the loop and after it, their uses read the value the loop was given
    instead. The loop's ``sdy.sharding`` keeps the entries of the other
    carries. Returns the loop (a new op when anything was hoisted).
    """
    invariant = invariant_carries(loop)
    if not invariant:
        return loop
    cond, body = (region.blocks[0] for region in loop.regions)
    returned = terminator(body)
    kept = [k for k in range(len(loop.operands)) if k not in invariant]
    for k in invariant:
        outer = loop.operands[k]
        for value in (body.arguments[k], cond.arguments[k], loop.results[k]):
            value.replace_all_uses_with(outer)
    attributes = dict(loop.attributes.items())
    if SHARDING_ATTR in attributes:
        per_value = sdy.TensorShardingPerValueAttr(attributes[SHARDING_ATTR]).shardings
        attributes[SHARDING_ATTR] = sdy.TensorShardingPerValueAttr.get(
            [per_value[k] for k in kept])
    new = ir.Operation.create(
        "stablehlo.while", results=[loop.results[k].type for k in kept],
        operands=[loop.operands[k] for k in kept], attributes=attributes, regions=2,
        loc=loop.location, ip=ir.InsertionPoint(loop))
    for block, region in ((cond, new.regions[0]), (body, new.regions[1])):
        for k in reversed(invariant):
            block.erase_argument(k)
        block.append_to(region)
    ir.Operation.create("stablehlo.return", operands=[returned.operands[k] for k in kept],
                        loc=returned.location, ip=ir.InsertionPoint(returned))
    returned.erase()
    for k, result in zip(kept, new.results):
        loop.results[k].replace_all_uses_with(result)
    loop.erase()
    return new


def hoist_all_invariant_carries(loop: ir.Operation) -> ir.Operation:
    """``hoist_invariant_carries`` until nothing is left to hoist (hoisting one carry can
    make another return the loop's operand); returns the loop as last rebuilt."""
    while (hoisted := hoist_invariant_carries(loop)) is not loop:
        loop = hoisted
    return loop


def terminator(block: ir.Block) -> ir.Operation:
    *_, last = block.operations
    return last.operation
