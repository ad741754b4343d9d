"""The form in which XLA's compiler takes a module shardc has propagated and exported.

XLA converts the StableHLO it is given to HLO and runs Shardy's import steps
again on that. Both expect a module as jax writes it, not one Shardy's export
already processed; ``module_for_xla`` rewrites, in a copy, what they would
mishandle:

* a ``while``'s per-carry sharding: XLA's conversion first simplifies the
  loop (folds ``k + 0`` to ``k``, makes equal constants one value) and then
  hoists every carry the body returns unchanged out of the loop, without
  shortening the loop's ``sdy.sharding``; it then fails or aborts the process
  with "has 13 leaf nodes while this sharding has 16", or pairs the remaining
  carries with the wrong shardings. Which carries go depends on all of XLA's
  folding, so no count shardc writes on the loop can be trusted to match.
  The copy hoists the carries it sees are invariant, then drops the loop's
  sharding. XLA's Shardy import drops op shardings anyway and re-derives them
  from the boundaries and constraints, the carries through the loop's data-flow
  edges, as for jax's own module (which never shards a loop): constraints that
  said the carries' shardings again would be extra seeds, and a seed changes
  the order in which XLA's propagation reaches the ops around the loop (a
  remat_scan'd MLP's LayerNorm after the loop took its batch dimension over two
  axes, where jax.jit's kept one per dimension: other collectives and other
  bits). An op reading a result of the loop loses its sharding too: XLA's
  conversion folds it when it is an identity (``r + 0``) and would move its
  one sharding onto the loop, every carry then sharded alike (a diffrax
  solve's scalar carries: "Number of tile assignment dimensions ... is
  different than the input rank"), and so does an op that could fold into
  such a reader (a chain of identities). Only where XLA must partition the op
  shardings as written (``keep_op_shardings``) does the copy say each
  remaining carry's sharding with closed constraints: of the operand (unless
  already so sharded), of every use of the carry in the condition and body,
  of a returned value sharded otherwise, and of the uses of the result. They
  pin the carry to the sharding shardc decided whichever carries XLA drops (a
  replicated scalar needs none).
* a ``reshape`` of a ``reshape`` back to the first one's operand type, or a
  ``transpose`` of a ``transpose`` whose permutations cancel (``swapaxes``
  twice, as a QR's Householder factors are read back): XLA folds the pair
  into that operand and moves the outer op's sharding onto the operand's
  producer, replacing a loop's per-carry sharding, or a multi-result custom
  call's (a LAPACK ``geqrf``), with a single one ("Number of tile assignment
  dimensions ... is different than the input rank", "Failed to get shape").
  The copy folds the pair itself, keeping the outer sharding as a constraint
  where it differs from the operand's.
* ``sdy.sharding`` on ``optimization_barrier`` (``jax.checkpoint``'s, around
  what the backward pass recomputes): XLA's conversion folds an identity of a
  result (``x - 0`` in ``softplus``) into the result and moves the folded op's
  one sharding onto the barrier, all its results then sharded alike ("Number
  of tile assignment dimensions ... is different than the input rank" for a
  scalar among them). The copy drops the barrier's sharding, for XLA's
  data-flow edges to re-derive, and where the results differ in rank it
  drops the shardings of the ops that could fold into a result as well (as
  for a loop's). Constraints on the results would be extra seeds: they
  reordered XLA's propagation through the recomputed backward pass (an
  nnx.remat'd FSDP block gathered its weights where jax.jit gathers the
  activations). Only where XLA must partition the op shardings as written
  (``keep_op_shardings``) does it follow each result by a closed constraint
  to its operand's sharding (the barrier passes values through: no reshard
  where XLA would make none), so a moved sharding lands on one value. (A
  ``case`` keeps its sharding: without it XLA re-derives its branches'
  results apart and its verifier rejects branches that return differently
  sharded values, "Inconsistent conditional sharding".)
* a ``case`` whose branches return a value sharded otherwise than the case's
  result (a gradient's branch ending in a dot, another in an add): XLA takes
  each branch's last op as its root and its verifier rejects roots sharded
  apart ("Inconsistent conditional sharding among instructions"). The copy
  returns such a value through a closed constraint to the case's sharding,
  the reshard XLA makes at the end of the branch anyway. A use of a result of a
  case with several results reads it through a closed constraint to the case's
  sharding of it: XLA's conversion folds an identity of a result (``zeros + r``)
  into the result and moved the folded op's one sharding onto the case, all its
  results then sharded alike ("Number of tile assignment dimensions ... is
  different than the input rank" for a scalar among them).
* ``sdy.sharding`` on an ``ApproxTopK`` custom call: XLA's conversion turns
  the call into its own reduction and rejects any sharding on it ("mhlo.sharding
  is not a supported attribute for ApproxTopK"; jax's own modules never carry
  one there). The copy drops it and constrains each result to its sharding
  instead, so XLA still computes it as shardc decided.
* ``sdy.reshard``: XLA's import does not resolve its mesh ("unknown mesh"). A
  closed ``sdy.sharding_constraint`` with the same sharding asks XLA for
  exactly the same reshard, in the form jax itself emits for
  ``wsc(wsc(x, source), target)``: a constraint to the operand's own sharding
  first (closed constraints the module already has get that first one too). Without it XLA's import applies the target to the operand's producer
  (a single-use value) and computes the producer in the target layout,
  gathering *its* operands instead.

* a module marked by ``keep_op_shardings`` (the cost-aware route's, when its
  search changed anything): XLA's Shardy import drops every op's
  ``sdy.sharding`` and propagates again from the boundaries and constraints,
  re-deriving whatever those seeds lead to, not the choices the search priced.
  The copy follows every sharded op's results by closed constraints to its
  shardings (``_constrain_op_results``), so XLA partitions them as written.

``check_xla_form`` then refuses, as an ``InternalError`` naming the op, a copy
that still holds any of these or that the verifier rejects: XLA aborts the
process on some malformed modules instead of returning an error.
"""

from __future__ import annotations

import io
import re

from jaxlib.mlir import ir

from shardc.dialects import sdy
from shardc.dialects.errors import InternalError
from shardc.dialects.sdy import SHARDING_ATTR, value_sharding
from shardc.dialects.while_loops import hoist_all_invariant_carries, terminator

LOOP = "stablehlo.while"
CASE = "stablehlo.case"
# Data-flow ops whose per-value sharding XLA's folding can overwrite with one sharding.
_DROPPED_SHARDINGS = ("stablehlo.optimization_barrier",)
# Custom calls XLA's conversion rewrites into other ops, refusing a sharding on them.
_UNSHARDABLE_CALLS = ("ApproxTopK",)
# Ops whose results keep their op's sharding in XLA's form (``_constrain_op_results``):
# constants take their users' shardings, the rest ``to_xla_form`` handles.
_DERIVED = frozenset({"stablehlo.constant", LOOP, CASE, *_DROPPED_SHARDINGS})
# A module attribute: XLA partitions the op shardings as written (the cost-aware
# route's choices), which its own Shardy import would drop and re-derive from the
# boundaries and constraints (``keep_op_shardings``).
KEEP_OP_SHARDINGS = "shardc.keep_op_shardings"
# Ops a pair of which XLA folds away when the second undoes the first.
_ROUND_TRIPS = ("stablehlo.reshape", "stablehlo.transpose")
# How the verifier's messages start: "'stablehlo.while' op result shardings ...".
_OP_NAMED = re.compile(r"'([\w.]+)' op ")


def module_for_xla(module: ir.Module) -> ir.Module:
    """A copy of ``module`` in the form XLA's compiler takes it in (the module docstring
    says what changes), checked by ``check_xla_form``; the caller's module is unchanged."""
    buffer = io.BytesIO()
    module.operation.write_bytecode(buffer)
    with module.context:
        copy = ir.Module.parse(buffer.getvalue())
        to_xla_form(copy.operation)
        check_xla_form(copy.operation)
    return copy


def keep_op_shardings(module: ir.Operation) -> None:
    """Mark ``module`` as one whose op shardings XLA must partition as written, not
    re-derive (``to_xla_form`` constrains every op's results in XLA's copy)."""
    module.attributes[KEEP_OP_SHARDINGS] = ir.UnitAttr.get(module.context)


def to_xla_form(module: ir.Operation) -> None:
    """Rewrite ``module`` in place into the form XLA's compiler takes it in."""
    keep = KEEP_OP_SHARDINGS in module.attributes
    if keep:
        del module.attributes[KEEP_OP_SHARDINGS]
    loops: list[ir.Operation] = []
    reshards: list[ir.Operation] = []
    round_trips: list[ir.Operation] = []
    constrained: list[ir.Operation] = []
    barriers: list[ir.Operation] = []
    cases: list[ir.Operation] = []

    def visit(op: ir.Operation) -> ir.WalkResult:
        if op.name in _DROPPED_SHARDINGS and SHARDING_ATTR in op.attributes:
            if _ranks(op) > 1:
                barriers.append(op)
            else:  # one sharding fits every result: XLA's data-flow edges re-derive it
                del op.attributes[SHARDING_ATTR]
        elif _is_unshardable_call(op) and SHARDING_ATTR in op.attributes:
            constrained.append(op)
        elif op.name == LOOP:
            loops.append(op)
        elif op.name == CASE:
            cases.append(op)
        elif op.name in ("sdy.reshard", "sdy.sharding_constraint"):
            reshards.append(op)
        elif op.name in _ROUND_TRIPS:
            round_trips.append(op)
        return ir.WalkResult.ADVANCE

    with module.context:
        module.walk(visit, ir.WalkOrder.POST_ORDER)
        for loop in loops:  # post-order: inner loops first
            loop = hoist_all_invariant_carries(loop)
            if keep:
                _constrain_carries(loop)
            elif SHARDING_ATTR in loop.attributes:
                del loop.attributes[SHARDING_ATTR]
                _unshard_result_users(loop)
        for case in cases:
            _constrain_branch_results(case)
        for outer in round_trips:
            _fold_round_trip(outer)
        for reshard in reshards:
            _reshard_as_constraints(reshard)
        for op in constrained:
            _constrain_results(op)
        for barrier in barriers:  # after the loops' carries got their constraints
            if keep:
                _constrain_like_operands(barrier)
            else:
                del barrier.attributes[SHARDING_ATTR]
                _unshard_result_users(barrier)
        if keep:  # last: what the rewrites above left sharded on an op
            _constrain_op_results(module)


def _constrain_op_results(module: ir.Operation) -> None:
    """Follow every result of an op carrying ``sdy.sharding`` by a closed constraint to it.

    Left out: what the other rewrites handle (loops, cases), constants (XLA
    copies one per use, each in its user's sharding: no collective), Shardy's
    own ops, the ops of a manual computation's body (partitioned by hand), and
    results no constraint could lay out otherwise (tokens, replicated scalars,
    unused results, ones read only through a constraint to the same sharding).
    """
    found: list[ir.Operation] = []

    def visit(op: ir.Operation) -> ir.WalkResult:
        if op.name == "sdy.manual_computation":
            return ir.WalkResult.SKIP
        if SHARDING_ATTR in op.attributes and op.name not in _DERIVED \
                and not op.name.startswith("sdy."):
            found.append(op)
        return ir.WalkResult.ADVANCE

    module.walk(visit, ir.WalkOrder.PRE_ORDER)
    for op in found:
        shardings = sdy.TensorShardingPerValueAttr(op.attributes[SHARDING_ATTR]).shardings
        after = ir.InsertionPoint.after(op)
        for result, sharding in zip(op.results, shardings, strict=True):
            if decides_anything(sharding, result.type, op) and not _read_as(result, sharding):
                constraint = sdy.ShardingConstraintOp(result, sharding, loc=op.location,
                                                      ip=after)
                result.replace_all_uses_except(constraint.result, constraint.operation)


def _read_as(value: ir.Value, sharding: ir.Attribute) -> bool:
    """Whether every use of ``value`` is a constraint to ``sharding`` (true of a value
    nothing reads: nothing to lay out)."""
    return all(use.owner.operation.name == "sdy.sharding_constraint"
               and use.owner.attributes["sharding"] == sharding for use in value.uses)


def check_xla_form(module: ir.Operation) -> None:
    """Refuse, as ``InternalError`` naming the op, a module XLA could fail on or abort
    the process over: one the verifier rejects (a per-value sharding whose count or
    ranks do not match the op's results among others), or one that still holds
    what ``to_xla_form`` rewrites (a loop's per-carry sharding, a reshard, a
    sharding XLA's conversion refuses)."""
    try:
        module.verify()
    except ir.MLIRError as error:
        first = error.error_diagnostics[0] if error.error_diagnostics else None
        reason = first.message if first is not None else str(error)
        named = _OP_NAMED.match(reason)
        raise _internal_error(reason, named.group(1) if named else None,
                              first.location if first is not None else None) from None
    found: list[tuple[ir.Operation, str]] = []

    def visit(op: ir.Operation) -> ir.WalkResult:
        reason = _not_for_xla(op)
        if reason is None:
            return ir.WalkResult.ADVANCE
        found.append((op, reason))
        return ir.WalkResult.INTERRUPT

    module.walk(visit)
    if found:
        op, reason = found[0]
        raise _internal_error(f"'{op.name}' op {reason}", op.name, op.location)


def _not_for_xla(op: ir.Operation) -> str | None:
    """Why XLA must not be handed ``op`` as it is, or None."""
    if op.name == "sdy.reshard":
        return "is not resolved by XLA's import (unknown mesh)"
    if SHARDING_ATTR not in op.attributes:
        return None
    if op.name == LOOP:
        return ("carries a per-value sharding, which XLA's loop simplification "
                "leaves unshortened when it drops carries")
    if op.name in _DROPPED_SHARDINGS or _is_unshardable_call(op):
        return "carries a sharding XLA's conversion refuses or misreads"
    return None


def _internal_error(reason: str, op: str | None, location: ir.Location | None
                    ) -> InternalError:
    where = f" at {location}" if location is not None else ""
    step = "the module for XLA"
    return InternalError(
        f"shardc internal error: {step} is invalid{where}: {reason} (a bug in shardc, not "
        "in the program: please report it with the program)",
        step=step, reason=reason, op=op, location=location)


def _is_unshardable_call(op: ir.Operation) -> bool:
    return (op.name == "stablehlo.custom_call"
            and ir.StringAttr(op.attributes["call_target_name"]).value in _UNSHARDABLE_CALLS)


def _constrain_carries(loop: ir.Operation) -> None:
    """Replace a loop's per-carry shardings by closed constraints of its operands, block
    arguments and results (the module docstring says why)."""
    if SHARDING_ATTR not in loop.attributes:
        return
    shardings = sdy.TensorShardingPerValueAttr(loop.attributes[SHARDING_ATTR]).shardings
    del loop.attributes[SHARDING_ATTR]
    cond, body = (region.blocks[0] for region in loop.regions)
    returned = terminator(body)
    for k, sharding in enumerate(shardings):
        if not decides_anything(sharding, loop.results[k].type, loop):
            continue
        operand = loop.operands[k]
        if not _sharded_as(operand, sharding):
            loop.operands[k] = _constrained(operand, sharding, ir.InsertionPoint(loop),
                                            loop.location)
        value = returned.operands[k]
        if not _sharded_as(value, sharding):
            returned.operands[k] = _constrained(value, sharding, ir.InsertionPoint(returned),
                                                loop.location)
        for block in (cond, body):
            _constrain_uses(block.arguments[k], sharding,
                            ir.InsertionPoint.at_block_begin(block), loop.location)
        _constrain_uses(loop.results[k], sharding, ir.InsertionPoint.after(loop),
                        loop.location)


def _unshard_result_users(op: ir.Operation) -> None:
    """Drop the sharding of each one-result op that could fold into a result of
    ``op`` (a loop, a barrier): XLA's conversion folds such an op when it is an
    identity (``r + 0``) and moves its one sharding onto ``op``, all of whose
    results it then shards alike ("Number of tile assignment dimensions ... is
    different than the input rank" for a scalar carry). Folds chain
    (``(r + 0) + select(true, 0, s)``), so the readers of a reader of the same
    type lose theirs too. XLA's Shardy import drops op shardings anyway; a case, a
    loop and Shardy's own ops keep theirs."""
    pending = list(op.results)
    seen: set[ir.Operation] = set()
    while pending:
        value = pending.pop()
        for use in value.uses:
            user = use.owner.operation
            if (user in seen or user.name in (LOOP, CASE) or user.name.startswith("sdy.")
                    or len(user.results) != 1):
                continue
            seen.add(user)
            if SHARDING_ATTR in user.attributes:
                del user.attributes[SHARDING_ATTR]
            if user.results[0].type == value.type:  # it could fold into ``value``
                pending.append(user.results[0])


def _constrain_branch_results(case: ir.Operation) -> None:
    """Have every branch of a ``case`` return each result in the case's sharding of it,
    through a closed constraint where the returned value is sharded otherwise, and the
    uses of a result of a case with several results read it through one (the module
    docstring says why)."""
    returns = [terminator(region.blocks[0]) for region in case.regions]
    if SHARDING_ATTR in case.attributes:
        shardings = list(
            sdy.TensorShardingPerValueAttr(case.attributes[SHARDING_ATTR]).shardings)
    else:  # open: replicated, as XLA leaves a conditional no sharding decides
        shardings = [_replicated_like(value_sharding(value), value.type)
                     for value in returns[0].operands]
    for returned in returns:
        for k, sharding in enumerate(shardings):
            value = returned.operands[k]
            if sharding is not None and decides_anything(sharding, value.type, case) \
                    and not _sharded_as(value, sharding):
                returned.operands[k] = _constrained(value, sharding,
                                                    ir.InsertionPoint(returned), case.location)
    if len(case.results) > 1 and SHARDING_ATTR in case.attributes:
        for result, sharding in zip(case.results, shardings):
            if decides_anything(sharding, result.type, case):
                _constrain_uses(result, sharding, ir.InsertionPoint.after(case), case.location)


def _replicated_like(sharding: ir.Attribute | None, type_: ir.Type) -> ir.Attribute | None:
    """A closed replicated sharding on ``sharding``'s mesh (None without one)."""
    if sharding is None or not isinstance(type_, ir.RankedTensorType):
        return None
    mesh = str(sdy.TensorShardingAttr(sharding).mesh_or_ref)
    dims = ", ".join("{}" for _ in range(type_.rank))
    return ir.Attribute.parse(f"#sdy.sharding<{mesh}, [{dims}]>")


def decides_anything(sharding: ir.Attribute, type_: ir.Type, op: ir.Operation) -> bool:
    """Whether a value of ``type_`` (a carry, an op's result) could be laid out otherwise
    than ``sharding`` says: not for a token, nor for a scalar no axis is unreduced on (it
    is replicated anyway), nor on a maximal mesh (a value placed on one device, e.g. a
    host callback's: no constraint can say that of an array, and XLA keeps such a value
    where it is)."""
    if not isinstance(type_, ir.RankedTensorType) or _on_maximal_mesh(sharding, op):
        return False
    tensor = sdy.TensorShardingAttr(sharding)
    return bool(list(tensor.dimension_shardings)) or bool(list(tensor.unreduced_axes))


def _on_maximal_mesh(sharding: ir.Attribute, op: ir.Operation) -> bool:
    """Whether ``sharding`` (of a value of ``op``) is on a mesh of one device and no axes."""
    mesh = sdy.TensorShardingAttr(sharding).mesh_or_ref
    if not isinstance(mesh, sdy.MeshAttr):  # a symbol: the module's sdy.mesh of that name
        module = op
        while module.name != "builtin.module":
            module = module.parent
        mesh = sdy.MeshAttr(ir.SymbolTable(module)[ir.FlatSymbolRefAttr(mesh).value]
                            .attributes["mesh"])
    return not list(mesh.axes) and bool(list(mesh.device_ids))


def _sharded_as(value: ir.Value, sharding: ir.Attribute) -> bool:
    own = value_sharding(value)
    return own is not None and own == sharding


def _constrained(value: ir.Value, sharding: ir.Attribute, ip: ir.InsertionPoint,
                 loc: ir.Location) -> ir.Value:
    """``value`` through a closed constraint to ``sharding`` (after one to its own
    sharding, where it has one: see ``_reshard_as_constraints``)."""
    own = value_sharding(value)
    if own is not None:
        value = sdy.ShardingConstraintOp(value, own, loc=loc, ip=ip).result
    return sdy.ShardingConstraintOp(value, sharding, loc=loc, ip=ip).result


def _constrain_uses(value: ir.Value, sharding: ir.Attribute, ip: ir.InsertionPoint,
                    loc: ir.Location) -> None:
    """Make every user of ``value`` read it through a closed constraint to ``sharding``."""
    if next(iter(value.uses), None) is None:
        return
    constraint = sdy.ShardingConstraintOp(value, sharding, loc=loc, ip=ip)
    value.replace_all_uses_except(constraint.result, constraint.operation)


def _ranks(op: ir.Operation) -> int:
    """How many different ranks ``op``'s results have."""
    return len({len(result.type.shape) for result in op.results
                if isinstance(result.type, ir.RankedTensorType)})  # fmt: skip


def _constrain_like_operands(barrier: ir.Operation) -> None:
    """Drop ``barrier``'s sharding and follow each result whose operand is sharded by a
    closed constraint to that operand's sharding: the barrier passes its operands
    through, so XLA reshards nowhere it would not (as when it re-derives the
    barrier's sharding), and a sharding its folding moves lands on one value."""
    del barrier.attributes[SHARDING_ATTR]
    after = ir.InsertionPoint.after(barrier)
    for operand, result in zip(barrier.operands, barrier.results, strict=True):
        sharding = value_sharding(operand)
        if sharding is None:
            continue
        constraint = sdy.ShardingConstraintOp(result, sharding, loc=barrier.location, ip=after)
        result.replace_all_uses_except(constraint.result, constraint.operation)


def _constrain_results(op: ir.Operation) -> None:
    """Move ``op``'s per-value shardings onto closed constraints of its results."""
    shardings = sdy.TensorShardingPerValueAttr(op.attributes[SHARDING_ATTR]).shardings
    del op.attributes[SHARDING_ATTR]
    sdy.constrain_results(op, shardings)


def _permutation(op: ir.Operation) -> list[int]:
    return [int(d) for d in ir.DenseI64ArrayAttr(op.attributes["permutation"])]


def _undoes(outer: ir.Operation, inner: ir.Operation) -> bool:
    """Whether ``outer`` applied to ``inner``'s result gives ``inner``'s operand back: two
    reshapes back to the first one's operand type, or two transposes whose
    permutations compose to the identity."""
    if inner.name != outer.name or inner.operands[0].type != outer.results[0].type:
        return False
    if outer.name == "stablehlo.reshape":
        return True
    inner_permutation = _permutation(inner)
    return all(inner_permutation[d] == i for i, d in enumerate(_permutation(outer)))


def _fold_round_trip(outer: ir.Operation) -> None:
    """``reshape(reshape(x))`` of ``x``'s own type, or ``transpose(transpose(x))`` whose
    permutations cancel: use ``x`` (constrained to the outer op's sharding where it
    differs from ``x``'s)."""
    owner = outer.operands[0].owner
    if isinstance(owner, ir.Block) or not _undoes(outer, owner.operation):
        return
    source = owner.operation.operands[0]
    wanted = value_sharding(outer.results[0])
    own = value_sharding(source)
    if wanted is not None and (own is None or wanted != own):
        source = sdy.ShardingConstraintOp(source, wanted, loc=outer.location,
                                          ip=ir.InsertionPoint(outer)).result
    outer.results[0].replace_all_uses_with(source)
    outer.erase()


def _reshard_as_constraints(reshard: ir.Operation) -> None:
    """Replace an ``sdy.reshard`` (or a closed constraint) by constraints to its operand's
    sharding, then its own."""
    source = reshard.operands[0]
    here = ir.InsertionPoint(reshard)
    own = value_sharding(source)
    if reshard.name == "sdy.sharding_constraint" and (own is None or own == reshard.attributes[
            "sharding"]):
        return  # nothing for XLA to move onto the producer
    if own is not None:
        source = sdy.ShardingConstraintOp(source, own, loc=reshard.location, ip=here).result
    constraint = sdy.ShardingConstraintOp(
        source, reshard.attributes["sharding"], loc=reshard.location, ip=here,
    )
    reshard.results[0].replace_all_uses_with(constraint.result)
    reshard.erase()
