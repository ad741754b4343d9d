"""Make loop-invariant ``while`` carries free variables of the loop, as XLA's import does.

XLA does not hand its Shardy the loops jax wrote: its import turns every carry
a loop's body returns unchanged (a weight a ``fori_loop`` or ``scan`` reads at
every step) into a free variable of the loop, and then gives every free
variable that has a sharding an open sharding constraint just before the
loop, read inside it instead. A carry ties its value inside the loop to the
value after it, a free variable does not, and the open constraint lets
propagation shard the uses inside the loop further than the value itself.
Propagation decides differently on the two forms (a gradient accumulated from
a hoisted weight can end up sharded on other axes), so ``jit`` rewrites
first and propagates the module XLA's own Shardy would see.
"""

from __future__ import annotations

from jaxlib.mlir import ir

from shardc.compiler.propagation.ir_access import EDGE_OP
from shardc.dialects import sdy
from shardc.dialects.sdy import value_sharding
from shardc.dialects.while_loops import hoist_all_invariant_carries

LOOP = "stablehlo.while"


def capture_loop_invariants(module: ir.Operation,
                            loops: list[ir.Operation] | None = None) -> None:
    """Hoist the invariant carries of every loop of ``module``, then open the shardings
    of every loop's free variables (inner loops first, as XLA does).

    ``loops``: the module's loops, inner loops first, when a walk the caller made
    anyway found them (``fold_identities``'s)."""
    for loop in hoist_loop_invariants(module, loops):
        open_free_variables(loop)


def hoist_loop_invariants(module: ir.Operation,
                          loops: list[ir.Operation] | None = None) -> list[ir.Operation]:
    """Hoist the invariant carries of every loop of ``module`` (``loops``, inner loops
    first, when the caller found them); returns the loops as rebuilt."""
    if loops is None:
        loops = []

        def visit(op: ir.Operation) -> ir.WalkResult:
            if op.name == LOOP:
                loops.append(op)
            return ir.WalkResult.ADVANCE

        module.walk(visit, ir.WalkOrder.POST_ORDER)
    return [loop if _has_data_flow_edges(loop) else hoist_all_invariant_carries(loop)
            for loop in loops]


def _has_data_flow_edges(loop: ir.Operation) -> bool:
    """Whether ``loop``'s results already feed data-flow edges (written by hand or by an
    earlier step): XLA's import runs before there are any, and hoisting a carry
    would give its edge an input of several users."""
    return any(use.owner.name == EDGE_OP for result in loop.results for use in result.uses)


def open_free_variables(loop: ir.Operation) -> None:
    """Read every free variable of ``loop`` that has a sharding (of rank > 0) through a
    fully open sharding constraint placed just before the loop."""
    for value in free_variables(loop):
        sharding = value_sharding(value)
        if sharding is None:
            continue
        tensor = sdy.TensorShardingAttr(sharding)
        rank = len(tensor.dimension_shardings)
        if rank == 0:
            continue
        opened = sdy.TensorShardingAttr.get(
            tensor.mesh_or_ref,
            [sdy.DimensionShardingAttr.get([], is_closed=False) for _ in range(rank)])
        constraint = sdy.ShardingConstraintOp(
            value, opened, loc=value.location, ip=ir.InsertionPoint(loop)).result
        for use in list(value.uses):
            if use.owner != loop and _is_inside(use.owner, loop):
                use.owner.operands[use.operand_number] = constraint


def free_variables(loop: ir.Operation) -> list[ir.Value]:
    """The values defined outside ``loop`` that ops inside its regions use, in the order
    of their first use."""
    # One walk reads what the ops use and what they (and their blocks) define: a value
    # is free where nothing inside defines it, which asks no op for its ancestors.
    used: dict[ir.Value, None] = {}
    defined: set[ir.Value] = set()

    def visit(op: ir.Operation) -> ir.WalkResult:
        for operand in op.operands:
            used.setdefault(operand)
        defined.update(op.results)
        if len(op.regions):
            _add_arguments(op, defined)
        return ir.WalkResult.ADVANCE

    _add_arguments(loop, defined)
    for region in loop.regions:
        for block in region.blocks:
            for op in block.operations:
                op.operation.walk(visit)
    return [value for value in used if value not in defined]


def _add_arguments(op: ir.Operation, defined: set[ir.Value]) -> None:
    for region in op.regions:
        for block in region.blocks:
            defined.update(block.arguments)


def _is_inside(op: ir.Operation | None, loop: ir.Operation) -> bool:
    """Is ``op`` ``loop`` itself or nested in one of its regions?"""
    while op is not None:
        if op == loop:
            return True
        parent = op.parent
        op = parent.operation if parent is not None else None
    return False
