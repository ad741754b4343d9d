"""Erase the sharding constraints nothing reads, as XLA does before its Shardy runs.

jax.jit drops a ``with_sharding_constraint`` whose result is unused from the
function it traces, but not from a loop body or a cond branch. XLA writes
every ``sdy.sharding_constraint`` as a ``Sharding`` custom call without side
effects, so a dead one is erased (with the dead ops that only fed it) before
its Shardy imports the module. MLIR's ``sdy.sharding_constraint`` is not free
of effects: left in, Shardy's ``apply-sharding-constraints`` would give its
sharding to its input, and the input would carry it out of the loop (a value
read by a dead fully replicated constraint in a loop body came out replicated
where jax.jit shards it).
"""

from __future__ import annotations

from collections.abc import Iterable

from jaxlib.mlir import ir

from shardc.compiler.propagation.graph import has_no_effects_of_its_own

CONSTRAINT = "sdy.sharding_constraint"


def _unused(op: ir.Operation) -> bool:
    return all(next(iter(result.uses), None) is None for result in op.results)


def _erasable(op: ir.Operation) -> bool:
    """A constraint, or an op without regions or effects, whose results are all unused."""
    name = op.name
    if name != CONSTRAINT and (len(op.regions) or not has_no_effects_of_its_own(op, name)):
        return False
    return bool(len(op.results)) and _unused(op)


def erase_dead_constraints(constraints: Iterable[ir.Operation]) -> int:
    """Erase each of ``constraints`` (``sdy.sharding_constraint`` ops) whose result is
    unused, then every constraint or effect-free op that only fed erased ops; return how
    many ops were erased."""
    work = [op for op in constraints if _unused(op)]
    erased = 0
    while work:
        op = work.pop()
        feeders = [operand.owner for operand in op.operands
                   if isinstance(operand.owner, ir.OpView | ir.Operation)]
        op.erase()
        erased += 1
        for feeder in feeders:
            feeder = feeder.operation
            if _erasable(feeder) and feeder not in work:
                work.append(feeder)
    return erased


def constraints_of(module: ir.Operation) -> list[ir.Operation]:
    """Every ``sdy.sharding_constraint`` of ``module``, in pre-order."""
    found: list[ir.Operation] = []

    def visit(op: ir.Operation) -> ir.WalkResult:
        if op.name == CONSTRAINT:
            found.append(op)
        return ir.WalkResult.ADVANCE

    module.walk(visit, ir.WalkOrder.PRE_ORDER)
    return found
