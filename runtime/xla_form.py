"""The form in which XLA's compiler takes a module shardc has propagated and exported.

XLA converts the StableHLO it is given to HLO and runs Shardy's import steps
again on that. Both expect a module as jax writes it, not one Shardy's export
already processed; ``module_for_xla`` rewrites, in a copy, what they would
mishandle:

* loop-invariant ``while`` carries (the body returns them unchanged): XLA's
  conversion hoists them out of the loop (the body reads the value from
  above) without shortening the loop's ``sdy.sharding``, and then fails (or
  crashes) with "has 7 leaf nodes while this sharding has 11", or pairs the
  remaining carries with the wrong shardings. The copy hoists them itself, so
  the loop's sharding keeps one entry per carry and XLA keeps every
  sharding shardc decided.
* a ``reshape`` of a ``reshape`` back to the first one's operand type: XLA
  folds the pair into that operand and moves the outer reshape's sharding
  onto the operand's producer, replacing a loop's per-carry sharding with a
  single one ("Number of tile assignment dimensions ... is different than the
  input rank"). The copy folds the pair itself, keeping the outer sharding
  as a constraint where it differs from the operand's.
* ``sdy.sharding`` on ``optimization_barrier``: implied by the closed
  shardings around it; dropped, XLA's data-flow edges re-derive it. (A
  ``case`` keeps its sharding: without it XLA re-derives its branches'
  results apart and its verifier rejects branches that return differently
  sharded values, "Inconsistent conditional sharding".)
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
"""

from __future__ import annotations

import io

from jaxlib.mlir import ir

from shardc.dialects import sdy
from shardc.dialects.sdy import SHARDING_ATTR, value_sharding
from shardc.dialects.while_loops import hoist_invariant_carries

# Data-flow ops whose shardings XLA must re-derive.
_DROPPED_SHARDINGS = ("stablehlo.optimization_barrier",)
# Custom calls XLA's conversion rewrites into other ops, refusing a sharding on them.
_UNSHARDABLE_CALLS = ("ApproxTopK",)


def module_for_xla(module: ir.Module) -> ir.Module:
    """A copy of ``module`` in the form XLA's compiler takes it in (the module docstring
    says what changes); the caller's module is unchanged."""
    buffer = io.BytesIO()
    module.operation.write_bytecode(buffer)
    with module.context:
        copy = ir.Module.parse(buffer.getvalue())
        loops: list[ir.Operation] = []
        reshards: list[ir.Operation] = []
        reshapes: list[ir.Operation] = []
        unshardable: list[ir.Operation] = []

        def visit(op: ir.Operation) -> ir.WalkResult:
            if op.name in _DROPPED_SHARDINGS and SHARDING_ATTR in op.attributes:
                del op.attributes[SHARDING_ATTR]
            elif (op.name == "stablehlo.custom_call" and SHARDING_ATTR in op.attributes
                  and ir.StringAttr(op.attributes["call_target_name"]).value
                  in _UNSHARDABLE_CALLS):
                unshardable.append(op)
            elif op.name == "stablehlo.while":
                loops.append(op)
            elif op.name in ("sdy.reshard", "sdy.sharding_constraint"):
                reshards.append(op)
            elif op.name == "stablehlo.reshape":
                reshapes.append(op)
            return ir.WalkResult.ADVANCE

        copy.operation.walk(visit, ir.WalkOrder.POST_ORDER)
        for loop in loops:  # post-order: inner loops first
            hoist_invariant_carries(loop)
        for reshape in reshapes:
            _fold_reshape_round_trip(reshape)
        for reshard in reshards:
            _reshard_as_constraints(reshard)
        for call in unshardable:
            _constrain_results(call)
    return copy


def _constrain_results(op: ir.Operation) -> None:
    """Move ``op``'s per-value shardings onto closed constraints of its results."""
    shardings = sdy.TensorShardingPerValueAttr(op.attributes[SHARDING_ATTR]).shardings
    del op.attributes[SHARDING_ATTR]
    sdy.constrain_results(op, shardings)


def _fold_reshape_round_trip(reshape: ir.Operation) -> None:
    """``reshape(reshape(x))`` of ``x``'s own type: use ``x`` (constrained to the outer
    reshape's sharding where it differs from ``x``'s)."""
    owner = reshape.operands[0].owner
    if isinstance(owner, ir.Block):
        return
    inner = owner.operation
    if inner.name != "stablehlo.reshape" or inner.operands[0].type != reshape.results[0].type:
        return
    source = inner.operands[0]
    wanted = value_sharding(reshape.results[0])
    own = value_sharding(source)
    if wanted is not None and (own is None or wanted != own):
        source = sdy.ShardingConstraintOp(source, wanted, loc=reshape.location,
                                          ip=ir.InsertionPoint(reshape)).result
    reshape.results[0].replace_all_uses_with(source)
    reshape.erase()


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
