"""Propagate in the op order XLA's Shardy sees, and hand later stages jax's order back.

XLA does not hand its Shardy the module jax wrote but one it converted to HLO
(inlining calls) and back: the way back emits each computation's instructions
in HLO's post-order (``HloComputation::MakeInstructionPostOrder``): from each
instruction nothing uses, first to last, depth first, an instruction after its
operands, taken first to last. A loop or conditional reads what its regions
capture as operands of its own, after the ones it has, in the order the
regions first use them (MLIR's ``getUsedValuesDefinedAbove``, a post-order
walk of the regions); a loop's invariant carries are captures by then (the
XLA dump before Shardy shows them last in the loop's tuple, after the carries
jax put behind them), so ``jit`` orders the blocks after hoisting them
(``capture_loop_invariants``). Propagation walks ops in block order, and where two
shardings conflict the op it reaches first decides (a weight's gradient
accumulated in a loop can end up sharded on the other dimension), so ``jit``
puts every block in that order before it propagates (``order_as_hlo``).

Only propagation follows XLA's order: what reads the propagated module for
anything else (the memory estimate's liveness, the explain table, export)
reads it in jax's order, which ``restore_jax_order`` puts back. Each op of a
reordered block carries its place in jax's order (``ORDER_ATTR``, a bookkeeping
attribute no rule or fingerprint reads) until then, so that copies of the
module (``explain``'s) can be put back too, and ops the pipeline added in
between go where their users or the op before them are.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from jaxlib.mlir import ir

from shardc.compiler.propagation.graph import GraphView
from shardc.compiler.stages.capture_loop_invariants import free_variables

ORDER_ATTR = "shardc.jax_order"
# On the module: some block is in XLA's order, its ops tagged with ``ORDER_ATTR``.
REORDERED_ATTR = "shardc.hlo_ordered"
# Ops whose regions read values defined outside them, as extra operands in HLO.
_CAPTURING = frozenset({"stablehlo.while", "stablehlo.case", "stablehlo.if"})


def order_as_hlo(module: ir.Operation) -> bool:
    """Reorder the ops of every single-block region of ``module``'s functions in HLO's
    post-order; returns whether some block moved (its ops then carry ``ORDER_ATTR``
    and the module ``REORDERED_ATTR``)."""
    moved = False
    # The functions' ops in pre-order once ordered, as the ordering meets them: what
    # renewing the uses goes through, with no walk of its own.
    ordered: list[ir.Operation] = []
    for op in module.regions[0].blocks[0].operations:
        if op.operation.name == "func.func":
            moved = _order_regions(op.operation, ordered) or moved
    if moved:
        module.attributes[REORDERED_ATTR] = ir.UnitAttr.get()
        renew_uses(ordered)
    return moved


def renew_uses(ops: list[ir.Operation]) -> None:
    """Give every value the list of uses XLA's import gives it: MLIR puts each new use
    first, and the import creates the ops in order (an op before the ops of its
    regions), so a value's uses read last user first. Propagation queues a
    value's users in that order when its sharding changes. ``ops``: every op of
    the functions, in pre-order."""
    for op in ops:
        operands = op.operands
        for k, value in enumerate(list(operands)):
            operands[k] = value  # taken off its value's use list, then put first


def _order_regions(op: ir.Operation, ordered: list[ir.Operation]) -> bool:
    """Order the single-block regions of ``op`` and those nested in them; add the ops
    of every region to ``ordered``, in pre-order once ordered."""
    moved = False
    for region in op.regions:
        blocks = list(region.blocks)
        if len(blocks) == 1:
            moved = _order_block(blocks[0], ordered) or moved
            continue
        for block in blocks:
            for inner in block.operations:
                inner.operation.walk(lambda nested: ordered.append(nested)
                                     or ir.WalkResult.ADVANCE, ir.WalkOrder.PRE_ORDER)
    return moved


def _order_block(block: ir.Block, ordered: list[ir.Operation]) -> bool:
    ops = [op.operation for op in block.operations]
    order = post_order(ops)
    moved = len(order) == len(ops) and order != list(range(len(ops)))
    now = ops
    if moved:
        index_type = ir.IntegerType.get_signless(64)
        for k, op in enumerate(ops):
            op.attributes[ORDER_ATTR] = ir.IntegerAttr.get(index_type, k)
        last = ops[-1]
        for k in order[:-1]:
            ops[k].move_before(last)
        now = ([ops[k] for k in order] if order[-1] == len(ops) - 1
               else [op.operation for op in block.operations])
    for op in now:
        ordered.append(op)
        if len(op.regions):
            moved = _order_regions(op, ordered) or moved
    return moved


def post_order(ops: list[ir.Operation]) -> list[int]:
    """``ops`` (one block's, its terminator last) in HLO's post-order, as indices into
    ``ops``: from each op whose results nothing uses, in block order, depth first,
    operands before users and in operand order, a loop's or conditional's captures
    after its operands."""
    producer = _producers(ops)
    inputs = [[producer.get(hash(value)) for value in _inputs(op)] for op in ops]
    read = {k for row in inputs for k in row}
    placed: list[int] = []
    visited: dict[int, bool] = {}  # False while its operands are visited
    for first, root in enumerate(ops):
        # An op no op of the block reads may still be read inside a region of one.
        if first in read or any(_used(result) for result in root.results):
            continue
        stack = [first]
        while stack:
            current = stack[-1]
            state = visited.get(current)
            if state is not None:
                stack.pop()
                if not state:
                    visited[current] = True
                    placed.append(current)
                continue
            visited[current] = False
            stack.extend(k for k in reversed(inputs[current])
                         if k is not None and k not in visited)
    return placed


def _producers(ops: list[ir.Operation]) -> dict[int, int]:
    """Each result of ``ops`` (by its value's hash: the value's address, where an op's
    hash digests its name, attributes and operands) to the index of its op."""
    return {hash(result): k for k, op in enumerate(ops) for result in op.results}


def _inputs(op: ir.Operation) -> list[ir.Value]:
    """What HLO's instruction reads: the op's operands, then what its regions capture."""
    values = list(op.operands)
    if op.name in _CAPTURING:
        values += free_variables(op)
    return values


def _used(value: ir.Value) -> bool:
    return next(iter(value.uses), None) is not None


def take_earlier_place(kept: ir.Operation, merged: ir.Operation) -> None:
    """``kept`` stands for ``merged`` from now on (the export merges equal constants):
    it takes the earlier of their places in jax's order, where the first of them
    in jax's order would have been kept."""
    place = merged.attributes[ORDER_ATTR] if ORDER_ATTR in merged.attributes else None
    if place is None:
        return
    own = kept.attributes[ORDER_ATTR] if ORDER_ATTR in kept.attributes else None
    if own is None or ir.IntegerAttr(place).value < ir.IntegerAttr(own).value:
        kept.attributes[ORDER_ATTR] = place


def restore_jax_order(module: ir.Operation, *, keep_tags: bool = False) -> None:
    """Put every block ``order_as_hlo`` reordered back in jax's order and drop the tags
    (nothing to do on a module it left as it was). ``keep_tags`` leaves them: an
    op's hash changes with its attributes, and a caller holding ops as keys (the
    origins ``explain`` recorded) keeps them findable."""
    if REORDERED_ATTR not in module.attributes:
        return
    if not keep_tags:
        del module.attributes[REORDERED_ATTR]
    for op in module.regions[0].blocks[0].operations:
        if op.operation.name == "func.func":
            _restore_regions(op.operation, keep_tags)


def _restore_regions(op: ir.Operation, keep_tags: bool, reads: list[int] | None = None) -> None:
    """Restore every block of ``op``'s regions, nested ones first; with ``reads``, add to
    it (by hash) each value an op nested in ``op`` reads, as a block around ``op``
    restored needs to know. Each op's operands are read once, whatever its depth."""
    for region in op.regions:
        for block in region.blocks:
            ops = [inner.operation for inner in block.operations]
            tags = [_tag(inner) for inner in ops]
            tagged = any(tag is not None for tag in tags)
            if not tagged and reads is None:
                for inner in ops:
                    if len(inner.regions):
                        _restore_regions(inner, keep_tags)
                continue
            # What each op reads: its operands, and what the ops in its regions read.
            op_reads = [list(map(hash, inner.operands)) for inner in ops]
            for inner, read in zip(ops, op_reads):
                if len(inner.regions):
                    _restore_regions(inner, keep_tags, read)
            if tagged:
                _restore_block(ops, tags, op_reads, keep_tags)
            if reads is not None:
                for read in op_reads:
                    reads.extend(read)


def _restore_block(ops: list[ir.Operation], tags: list[int | None], reads: list[list[int]],
                   keep_tags: bool) -> None:
    """Order ``ops`` (a block's, as they stand, with their ``tags`` and what each reads,
    ``reads``, by hash, nested regions included) by their place in
    jax's order, each op the pipeline added just before its first user in the block
    (after the op before it, when it has none), operands always first; drop the
    tags unless ``keep_tags``."""
    n = len(ops)
    producers = _producers(ops)
    # Who reads each op's results in this block (through nested regions too).
    users: list[list[int]] = [[] for _ in ops]
    for k, read in enumerate(reads):
        for value in read:
            producer = producers.get(value)
            if producer is not None and producer != k:
                users[producer].append(k)
    # An op's place: its tag, or just after the op before it; never after its first
    # user's (a constant the export merged keeps one copy's tag, maybe a later one's),
    # and ops the pipeline added go just before it. Ties (copies of one op, as
    # Shardy's import splits a constant per user) keep their users' order.
    place: list[float] = []
    before = -1.0
    for tag in tags:
        if tag is not None:
            before = float(tag)
            place.append(before)
        else:
            place.append(before + 0.5)
    first = [float("inf")] * n
    for k in range(n - 1, -1, -1):
        if users[k]:
            first[k] = min(place[u] for u in users[k])
            if tags[k] is None or first[k] <= place[k]:
                place[k] = first[k] - 0.25
    keys = [(place[k], first[k], k) for k in range(n)]
    keys[n - 1] = (float("inf"), 0.0, n - 1)  # the terminator stays last
    # Every op's place is below its users' (the block is in a valid order, so its
    # users follow it and have their places when it takes its own, below the
    # first): the order of the keys puts operands first by itself.
    order = sorted(range(n), key=keys.__getitem__)
    if order != list(range(n)):
        last = ops[-1]
        for k in order[:-1]:
            ops[k].move_before(last)
    if keep_tags:
        return
    # Last: an op's hash changes with its attributes.
    for op, tag in zip(ops, tags):
        if tag is not None:
            del op.attributes[ORDER_ATTR]


def _tag(op: ir.Operation) -> int | None:
    # One lookup, its attribute read as the IntegerAttr the bindings return.
    tag = op.attributes.get(ORDER_ATTR)
    return None if tag is None else tag.value


def order_tags(ops: Sequence[ir.Operation]) -> list[int | None] | None:
    """Each op's place in jax's order (``ORDER_ATTR``; None for an op the pipeline
    added), or None where no op carries one (nothing was reordered)."""
    tags = [_tag(op) for op in ops]
    return tags if any(tag is not None for tag in tags) else None


def in_jax_order(nested: Sequence[int], tags: Sequence[int | None]) -> list[int]:
    """A block's ops (indices into ``tags``) in jax's order: by their tags, an op
    without one staying behind the op before it."""
    keyed, last, behind = [], -1, 0
    for i in nested:
        if tags[i] is None:
            behind += 1
        else:
            last, behind = tags[i], 0
        keyed.append((last, behind, i))
    keyed.sort()
    return [i for _, _, i in keyed]


def jax_ordered(graph: Any) -> Any:
    """``graph`` of a module ``order_as_hlo`` reordered, read with every block's ops in
    jax's order (``in_jax_order``): what reads liveness (XLA lays out memory in the
    program's own order) without putting the module back. A ``GraphView`` replacing
    ``op_blocks`` where some op carries its place, else ``graph`` itself."""
    tags = order_tags(graph.ops)
    if tags is None:
        return graph
    return GraphView(graph, op_blocks=[
        [(args, in_jax_order(nested, tags)) for args, nested in blocks]
        for blocks in graph.op_blocks])
