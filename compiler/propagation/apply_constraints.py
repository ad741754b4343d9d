"""``sdy-apply-sharding-constraints`` (spec 7.2), without the chain rule.

A fully closed ``sdy.sharding_constraint`` whose input has no sharding, and
no other constraint user with a different sharding, gives its sharding to
the input (op results and function arguments). Inputs owned by data-flow
edges are left alone (Shardy moves the constraint there; not done yet).
"""

from __future__ import annotations

from jaxlib.mlir import ir
from jaxlib.mlir.dialects import sdy

from shardc.compiler.propagation.data_flow_edges import _ops
from shardc.compiler.propagation.ir_access import EDGE_OP, SHARDING


def _is_closed(attr: ir.Attribute) -> bool:
    sharding = sdy.TensorShardingAttr(attr)
    return all(sdy.DimensionShardingAttr(d).is_closed for d in sharding.dimension_shardings)


def _input_sharding(value: ir.Value):
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
        return True, entries.get(SHARDING)
    owner = owner.operation
    if owner.name in (EDGE_OP, "sdy.sharding_constraint", "sdy.reshard") or \
            owner.name.startswith("sdy.") or owner.regions:
        return False, None
    if SHARDING in owner.attributes:
        return True, owner.attributes[SHARDING]
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
                values[SHARDING] = attr
            new.append(ir.DictAttr.get(values))
        func.attributes["arg_attrs"] = ir.ArrayAttr.get(new)
        return
    owner = owner.operation
    results = list(owner.results)
    text = str(attr)[len("#sdy.sharding"):]
    mesh = text[1:text.index(",")]
    entries = [text if r == value else f"<{mesh}, [" + ", ".join(
        ["{?}"] * _rank(r)) + "]>" for r in results]
    owner.attributes[SHARDING] = ir.Attribute.parse(
        "#sdy.sharding_per_value<[" + ", ".join(entries) + "]>")


def _rank(value: ir.Value) -> int:
    return ir.ShapedType(value.type).rank if isinstance(value.type, ir.ShapedType) else 0


def apply_sharding_constraints(module: ir.Operation) -> None:
    """Copy fully closed constraint shardings onto unsharded inputs."""
    with module.context:
        for op in _ops(module, ir.WalkOrder.PRE_ORDER):
            if op.name == "sdy.sharding_constraint":
                _apply(op.operands[0], op.attributes["sharding"])
            elif op.name == "sdy.manual_computation":
                ins = sdy.TensorShardingPerValueAttr(op.attributes["in_shardings"]).shardings
                for value, sharding in zip(op.operands, ins):
                    _apply(value, sharding)


def _constraint_sharding(user: ir.Operation, index: int) -> ir.Attribute | None:
    if user.name == "sdy.sharding_constraint":
        return user.attributes["sharding"]
    if user.name == "sdy.manual_computation":
        return sdy.TensorShardingPerValueAttr(user.attributes["in_shardings"]).shardings[index]
    return None


def _apply(value: ir.Value, sharding: ir.Attribute) -> None:
    shardable, current = _input_sharding(value)
    if not shardable or current is not None or not _is_closed(sharding):
        return
    for use in value.uses:
        other = _constraint_sharding(use.owner, use.operand_number)
        if other is not None and other != sharding:
            return
    _set_input(value, sharding)
