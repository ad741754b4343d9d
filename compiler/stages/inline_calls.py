"""Inline every ``func.call``, including calls nested in ``while``/``case`` regions.

MLIR's generic ``inline`` pass leaves calls inside StableHLO region ops alone
(the dialect does not declare those regions legal to inline into), and JAX
puts its scan bodies (``closed_call``, ``dynamic_index_in_dim``...) exactly
there. Shardy instead clones the callee per call site and turns each call
into an ``sdy.named_computation`` whose boundary is a data-flow edge; for
propagation both give every call site its own copy of the callee's values,
so shardc inlines: the callee is cloned, its block arguments are replaced by
the call's operands, its operations move before the call and the call's
results are replaced by the returned values. Callees left without callers
are removed by ``symbol-dce`` afterwards.
"""

from __future__ import annotations

from jaxlib.mlir import ir

from shardc.compiler.sharding.walker import ops_in_preorder


def _calls(module: ir.Operation) -> list[ir.Operation]:
    return [op for op in ops_in_preorder(module) if op.name == "func.call"]


def _functions(module: ir.Operation) -> dict[str, ir.Operation]:
    return {
        ir.StringAttr(op.operation.attributes["sym_name"]).value: op.operation
        for op in module.regions[0].blocks[0].operations
        if op.operation.name == "func.func"
    }


def inline_call(call: ir.Operation, callee: ir.Operation) -> None:
    """Replace one call by a copy of its single-block callee's body."""
    copy = callee.clone(ip=ir.InsertionPoint(callee))
    body = copy.regions[0].blocks[0]
    for argument, operand in zip(body.arguments, call.operands):
        argument.replace_all_uses_with(operand)
    operations = list(body.operations)
    terminator = operations[-1]
    for op in operations[:-1]:
        op.operation.move_before(call)
    for result, returned in zip(call.results, terminator.operands):
        result.replace_all_uses_with(returned)
    call.erase()
    copy.erase()


def inline_all_calls(module: ir.Operation) -> int:
    """Inline calls until none is left; return how many were inlined.

    Recursive call graphs cannot be inlined and are left as they are (JAX
    never emits them). A callee with several blocks is left too.
    """
    inlined = 0
    for _ in range(64):  # call-graph depth; JAX nests a few levels at most
        functions = _functions(module)
        progress = False
        for call in _calls(module):
            callee = functions.get(ir.FlatSymbolRefAttr(call.attributes["callee"]).value)
            if callee is None or len(callee.regions[0].blocks) != 1 or _inside(call, callee):
                continue
            inline_call(call, callee)
            inlined += 1
            progress = True
        if not progress:
            break
    return inlined


def _inside(op: ir.Operation, ancestor: ir.Operation) -> bool:
    parent = op.parent
    while parent is not None:
        if parent == ancestor:
            return True
        parent = parent.parent
    return False
