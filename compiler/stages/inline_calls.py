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
are removed by ``symbol-dce`` afterwards. As MLIR's inliner does, every inlined
op's location becomes a call site: its own location called from the call's,
so diagnostics, reports and XLA's metadata reach the user's line that made
the call (JAX's private helpers such as ``_take`` carry bare op names).
"""

from __future__ import annotations

import re

from jaxlib.mlir import ir

from shardc.compiler.sharding.walker import nested_ops

CALL_OP = "func.call"

# A location that is only a name (``loc("gather")``): no file position of its own.
# MLIR prints a backslash doubled and a quote or unprintable byte as two hex digits.
_BARE_NAME = re.compile(r'loc\("((?:[^"\\]|\\\\|\\[0-9A-Fa-f]{2})*)"\)')
_ESCAPE = re.compile(rb"\\(\\|[0-9A-Fa-f]{2})")


def _unescape(printed: str) -> str:
    """The name a printed ``loc("...")`` holds (escapes are bytes of its UTF-8)."""
    raw = _ESCAPE.sub(lambda m: b"\\" if m.group(1) == b"\\" else bytes([int(m.group(1), 16)]),
                      printed.encode())
    return raw.decode("utf-8", "replace")


def _calls(module: ir.Operation) -> list[ir.Operation]:
    return nested_ops(module, ir.WalkOrder.PRE_ORDER, {CALL_OP})


def _functions(module: ir.Operation) -> dict[str, ir.Operation]:
    return {
        ir.StringAttr(op.operation.attributes["sym_name"]).value: op.operation
        for op in module.regions[0].blocks[0].operations
        if op.operation.name == "func.func"
    }


class Relocations:
    """The locations inlined ops get, each made once.

    Locations are uniqued, and an inlined op's new location depends on its own and
    the call's alone. Whether its own is a bare name is read from its printed form
    (slow to print, above all nested call sites) only for a name location, once.
    """

    def __init__(self, context: ir.Context) -> None:
        self.context = context
        self._name_kind = ir.Location.name("", context=context).typeid
        self._names: dict[ir.Attribute, str | None] = {}
        self._made: dict[tuple[ir.Attribute, ir.Attribute], ir.Location] = {}

    def at(self, location: ir.Location, caller: ir.Location) -> ir.Location:
        """``location`` as inlined at ``caller``: a call site, or for a bare name jax's
        own form for a named op (the name over where it was traced), which XLA's
        metadata turns into the op name and its source frames."""
        own = location.attr
        key = (own, caller.attr)
        made = self._made.get(key)
        if made is None:
            if own not in self._names:
                bare = (_BARE_NAME.fullmatch(str(location))
                        if location.typeid == self._name_kind else None)
                self._names[own] = None if bare is None else _unescape(bare.group(1))
            name = self._names[own]
            if name is not None:
                made = ir.Location.name(name, childLoc=caller, context=self.context)
            else:
                made = ir.Location.callsite(location, [caller], context=self.context)
            self._made[key] = made
        return made


def inline_call(call: ir.Operation, callee: ir.Operation,
                relocations: Relocations) -> list[ir.Operation]:
    """Replace one call by a copy of its single-block callee's body; return the calls
    the copy brought in, in the order they come."""
    copy = callee.clone(ip=ir.InsertionPoint(callee))
    body = copy.regions[0].blocks[0]
    for argument, operand in zip(body.arguments, call.operands):
        argument.replace_all_uses_with(operand)
    operations = list(body.operations)
    terminator = operations[-1]
    caller = call.location

    brought: list[ir.Operation] = []

    def relocate(op: ir.Operation) -> ir.WalkResult:
        op.location = relocations.at(op.location, caller)
        if op.name == CALL_OP:
            brought.append(op)
        return ir.WalkResult.ADVANCE

    # One walk over the whole copy: relocating its own op and terminator too is
    # harmless, both are erased below.
    copy.walk(relocate)
    for op in operations[:-1]:
        op.operation.move_before(call)
    for result, returned in zip(call.results, terminator.operands):
        result.replace_all_uses_with(returned)
    call.erase()
    copy.erase()
    return brought


def inline_all_calls(module: ir.Operation, calls: list[ir.Operation] | None = None) -> int:
    """Inline calls until none is left; return how many were inlined.

    ``calls``: the module's calls in pre-order, when a walk the caller made anyway
    found them. Recursive call graphs cannot be inlined and are left as they are
    (JAX never emits them). A callee with several blocks is left too.
    """
    inlined = 0
    functions = _functions(module)
    # A call to the only function would be recursive: no walk can find one to inline.
    if len(functions) < 2:
        return inlined
    relocations = Relocations(module.context)
    if calls is None:
        calls = _calls(module)
    for _ in range(64):  # call-graph depth; JAX nests a few levels at most
        # Only the calls inlined bodies bring in are new: the next round looks at
        # those alone (a call left here would be left again).
        brought: list[ir.Operation] = []
        for call in calls:
            callee = functions.get(ir.FlatSymbolRefAttr(call.attributes["callee"]).value)
            if callee is None or len(callee.regions[0].blocks) != 1 or _inside(call, callee):
                continue
            brought += inline_call(call, callee, relocations)
            inlined += 1
        if not brought:
            break
        calls = brought
    return inlined


def _inside(op: ir.Operation, ancestor: ir.Operation) -> bool:
    parent = op.parent
    while parent is not None:
        if parent == ancestor:
            return True
        parent = parent.parent
    return False
