"""``sdy-apply-sharding-constraints``, without the chain rule.

A fully closed ``sdy.sharding_constraint`` (or a ``sdy.manual_computation``'s
in-sharding) whose input has no sharding, and no other constraint user with
a different sharding, gives its sharding to the input: a function argument
or an op result (ops with regions, such as scatter or reduce, included). An
input that is a data-flow edge's value keeps no sharding of its own, as in
Shardy: the constraint moves right after it and takes over its other uses
(a manual computation gets a new constraint there); only the constraint's
unreduced axes, which propagation never moves, are set on the edge itself.
"""

from __future__ import annotations

from jaxlib.mlir import ir

from shardc.compiler.propagation.ir_access import EDGE_OP
from shardc.compiler.sharding.walker import nested_ops
from shardc.dialects import sdy
from shardc.dialects.sdy import SHARDING_ATTR


def _is_closed(attr: ir.Attribute) -> bool:
    sharding = sdy.TensorShardingAttr(attr)
    return all(sdy.DimensionShardingAttr(d).is_closed for d in sharding.dimension_shardings)


def _input_sharding(value: ir.Value):
    """``(shardable, sharding)`` of a constraint's input; shardable is ``"edge"`` for a
    data-flow edge's value (it takes the constraint after it instead)."""
    owner = value.owner
    if isinstance(owner, ir.Block):
        func = owner.owner
        if func is None or func.operation.name != "func.func":
            return False, None
        index = value.arg_number
        if "arg_attrs" not in func.attributes:
            return True, None
        d = ir.DictAttr(ir.ArrayAttr(func.attributes["arg_attrs"])[index])
        entries = {d[i].name: d[i].attr for i in range(len(d))}
        return True, entries.get(SHARDING_ATTR)
    owner = owner.operation
    if owner.name == EDGE_OP:  # its sharding is its own `sharding` attribute
        return "edge", owner.attributes["sharding"] if "sharding" in owner.attributes else None
    if owner.name.startswith("sdy.") and owner.name != "sdy.constant":
        return False, None  # constraints, reshards, computations: shardings of their own
    if SHARDING_ATTR in owner.attributes:
        return True, owner.attributes[SHARDING_ATTR]
    return True, None


def _set_input(value: ir.Value, attr: ir.Attribute) -> None:
    owner = value.owner
    if isinstance(owner, ir.Block):
        func = owner.owner.operation
        n = len(owner.arguments)
        old = list(ir.ArrayAttr(func.attributes["arg_attrs"])) if "arg_attrs" in \
            func.attributes else []
        new = []
        for k in range(n):
            d = ir.DictAttr(old[k]) if k < len(old) else ir.DictAttr.get({})
            values = {d[i].name: d[i].attr for i in range(len(d))}
            if k == value.arg_number:
                values[SHARDING_ATTR] = attr
            new.append(ir.DictAttr.get(values))
        func.attributes["arg_attrs"] = ir.ArrayAttr.get(new)
        return
    owner = owner.operation
    results = list(owner.results)
    text = str(attr)[len("#sdy.sharding"):]
    mesh = text[1:text.index(",")]
    entries = [text if r == value else f"<{mesh}, [" + ", ".join(
        ["{?}"] * _rank(r)) + "]>" for r in results]
    owner.attributes[SHARDING_ATTR] = ir.Attribute.parse(
        "#sdy.sharding_per_value<[" + ", ".join(entries) + "]>")


def _rank(value: ir.Value) -> int:
    return ir.ShapedType(value.type).rank if isinstance(value.type, ir.ShapedType) else 0


def apply_sharding_constraints(module: ir.Operation) -> None:
    """Copy fully closed constraint shardings onto unsharded inputs."""
    with module.context:
        for op in nested_ops(module, ir.WalkOrder.PRE_ORDER,
                       {"sdy.sharding_constraint", "sdy.manual_computation"}):
            if op.name == "sdy.sharding_constraint":
                _apply(op.operands[0], op.attributes["sharding"], op)
            elif op.name == "sdy.manual_computation":
                ins = sdy.TensorShardingPerValueAttr(op.attributes["in_shardings"]).shardings
                for value, sharding in zip(op.operands, ins):
                    _apply(value, sharding, None, op.location)


def _constraint_sharding(user: ir.Operation, index: int) -> ir.Attribute | None:
    if user.name == "sdy.sharding_constraint":
        return user.attributes["sharding"]
    if user.name == "sdy.manual_computation":
        return sdy.TensorShardingPerValueAttr(user.attributes["in_shardings"]).shardings[index]
    return None


def _apply(value: ir.Value, sharding: ir.Attribute, constraint: ir.Operation | None,
           location: ir.Location | None = None) -> None:
    """Apply ``sharding`` to ``value`` if Shardy would; ``constraint`` is the op it comes
    from (None: a manual computation's in-sharding, at ``location``)."""
    shardable, current = _input_sharding(value)
    if not shardable or current is not None or not _is_closed(sharding):
        return
    for use in value.uses:
        other = _constraint_sharding(use.owner, use.operand_number)
        if other is not None and other != sharding:
            return
    if shardable != "edge":
        _set_input(value, sharding)
        return
    edge = value.owner.operation
    if constraint is None:
        constraint = sdy.ShardingConstraintOp(value, sharding, loc=location,
                                              ip=ir.InsertionPoint.after(edge)).operation
    else:
        constraint.move_after(edge)
    value.replace_all_uses_except(constraint.results[0], constraint)
    # Unreduced axes do not propagate: the edge takes them from the constraint
    # itself, or the loop would carry the value reduced.
    unreduced = list(sdy.TensorShardingAttr(sharding).unreduced_axes)
    if unreduced:
        mesh = sdy.TensorShardingAttr(sharding).mesh_or_ref
        edge.attributes["sharding"] = sdy.TensorShardingAttr.get(
            mesh, [sdy.DimensionShardingAttr.get([], is_closed=False)] * _rank(value),
            [], unreduced)
