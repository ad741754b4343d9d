"""Import steps of the propagation pipeline, one small function each.

Each function mirrors one Shardy import pass on the bindings and is what the
pipeline (``shardc.compiler.pipelines``) calls in order:
``remove_size_one_axes``, ``constant_or_scalar_splitter``,
``manual_axes_cleanup``, ``apply_sharding_constraints`` and
``sharding_group_import``. The data-flow edge step lives in
``data_flow_edges``; symbol DCE and inlining are MLIR's generic passes.
"""

from __future__ import annotations

from jaxlib.mlir import ir

from shardc.compiler.propagation.graph import _EFFECTFUL, ELEMENTWISE
from shardc.compiler.propagation.ir_access import read_meshes
from shardc.compiler.propagation.manual import MANUAL_OP, manual_axes_of
from shardc.compiler.sharding.axes import full_axis, mesh_sort_key
from shardc.compiler.sharding.tensor import (
    DimSharding,
    TensorSharding,
    format_per_value,
    format_sharding,
    parse_per_value,
    parse_sharding,
)
from shardc.compiler.sharding.walker import (
    attribute_dict,
    attribute_names,
    map_shardings,
    nested_ops,
)

_CONSTANT_PRESERVING = frozenset({
    "stablehlo.broadcast_in_dim", "stablehlo.reshape", "stablehlo.slice",
})


def _is_scalar(value: ir.Value) -> bool:
    return isinstance(value.type, ir.ShapedType) and ir.ShapedType(value.type).rank == 0


# ------------------------------------------------------------------ size-one axes
def remove_size_one_axes(module: ir.Operation) -> None:
    """Drop axes of size 1 from every sharding (only if some mesh has one)."""
    meshes = read_meshes(module)
    if not any(1 in info.sizes.values() for info in meshes.values()):
        return

    def strip(attr):
        sharding = parse_sharding(str(attr), meshes)
        if sharding.mesh not in meshes:
            return attr
        sizes = meshes[sharding.mesh].sizes

        def keep(axes):
            return tuple(a for a in axes if sizes.get(a[0], 0) != 1)

        dims = []
        for dim in sharding.dims:
            axes = keep(dim.axes)
            priority = None if (dim.closed and not axes) else dim.priority
            dims.append(DimSharding(axes, dim.closed, priority))
        new = TensorSharding(sharding.mesh, tuple(dims), keep(sharding.replicated),
                             keep(sharding.unreduced))
        if new == sharding:
            return attr
        return ir.Attribute.parse(format_sharding(new), attr.context)

    map_shardings(module, strip)


# ------------------------------------------------------------------ constants
def _to_sdy_constant(op: ir.Operation) -> None:
    attrs = attribute_dict(op)
    if attrs is None:
        new = _renamed_through_text(op, "sdy.constant")
    else:
        new = ir.Operation.create("sdy.constant", results=[r.type for r in op.results],
                                  attributes=attrs, loc=op.location, ip=ir.InsertionPoint(op))
    op.results[0].replace_all_uses_with(new.results[0])
    op.erase()


def _renamed_through_text(op: ir.Operation, name: str) -> ir.Operation:
    """A copy of ``op`` named ``name``, inserted before it, made from its printed form.

    For a constant whose value the bindings cannot read (complex values: they
    raise, or abort when read by position), the printer and parser still can.
    Its other attributes are set afterwards (the parser verifies the detached
    op, which cannot resolve a mesh symbol).
    """
    extra = {key: op.attributes[key] for key in attribute_names(op) if key != "value"}
    for key in extra:
        del op.attributes[key]
    text = op.get_asm(print_generic_op_form=True, enable_debug_info=True, assume_verified=True)
    generic = text.split(" = ", 1)[1] if text.lstrip().startswith("%") else text
    new = ir.Operation.parse(generic.replace(f'"{op.name}"', f'"{name}"', 1), context=op.context)
    ir.InsertionPoint(op).insert(new)
    for key, value in extra.items():
        new.attributes[key] = value
    return new


def _is_pure_preserving(op: ir.Operation) -> bool:
    name = op.name
    if name in _CONSTANT_PRESERVING:
        return True
    return name in ELEMENTWISE and name not in _EFFECTFUL


def _clone(result: ir.Value, mapping: dict, groups: dict[ir.Value, list[ir.Operation]]) -> None:
    """Clone the ops computing ``result`` (``mapping``: original value -> copy) and the
    sharding groups ``result`` is in (``groups``: found once per value, as copies only
    ever take uses away from the original)."""
    if _is_scalar(result) or result in mapping:
        return
    op = result.owner.operation
    for operand in op.operands:
        if _def_op(operand) is not None:
            _clone(operand, mapping, groups)
    clone = op.clone(ip=ir.InsertionPoint(op))
    for k, operand in enumerate(op.operands):
        if operand in mapping:
            clone.operands[k] = mapping[operand]
    for old, new in zip(op.results, clone.results):
        mapping[old] = new
    if result not in groups:
        groups[result] = [use.owner for use in result.uses
                          if use.owner.name == "sdy.sharding_group"]
    for group in groups[result]:
        copy = group.clone(ip=ir.InsertionPoint(op))
        copy.operands[0] = mapping[result]


def _def_op(value: ir.Value) -> ir.Operation | None:
    owner = value.owner
    return None if isinstance(owner, ir.Block) else owner.operation


class _Split:
    """The constants (and ops of constants only) and scalar broadcasts of one function
    found so far, in walk order, and their results (operands are looked up by value:
    cheaper through the bindings than by defining op)."""

    def __init__(self) -> None:
        self.constants: dict[ir.Operation, None] = {}  # ordered sets
        self.expansions: dict[ir.Operation, None] = {}
        self.constant_values: set[ir.Value] = set()
        self.split_values: set[ir.Value] = set()  # results of both
        self.groups: dict[ir.Value, list[ir.Operation]] = {}  # see _clone

    def add(self, op: ir.Operation, ops: dict[ir.Operation, None]) -> None:
        ops[op] = None
        results = list(op.results)
        self.split_values.update(results)
        if ops is self.constants:
            self.constant_values.update(results)

    def process(self, op: ir.Operation) -> None:
        """Classify ``op`` or give each of its non-scalar constant operands its own copy."""
        name = op.name
        if name == "sdy.sharding_group":
            return
        if name in ("sdy.constant", "stablehlo.iota"):
            self.add(op, self.constants)
            return
        operands = list(op.operands)
        if _is_pure_preserving(op) and all(v in self.constant_values for v in operands):
            self.add(op, self.constants)
            return
        if name == "stablehlo.broadcast_in_dim" and _is_scalar(operands[0]):
            self.add(op, self.expansions)
            return
        for k, operand in enumerate(operands):
            if operand in self.split_values and not _is_scalar(operand):
                mapping: dict = {}
                _clone(operand, mapping, self.groups)
                op.operands[k] = mapping[operand]

    def erase_unused(self) -> None:
        for op in [*self.expansions, *reversed(self.constants)]:
            users = [u.owner for r in op.results for u in r.uses]
            if all(u.name == "sdy.sharding_group" for u in users):
                for user in users:
                    user.erase()
                op.erase()


def constant_or_scalar_splitter(module: ir.Operation) -> None:
    """Turn constants into ``sdy.constant`` and give every non-constant use its own copy."""
    with module.context:
        for op in nested_ops(module, ir.WalkOrder.PRE_ORDER, {"stablehlo.constant"}):
            _to_sdy_constant(op)
        for func in module.regions[0].blocks[0].operations:
            if func.operation.name != "func.func":
                continue
            split = _Split()
            for op in nested_ops(func.operation, ir.WalkOrder.PRE_ORDER):
                split.process(op)
            split.erase_unused()


# ------------------------------------------------------------------ manual axes
def manual_axes_cleanup(module: ir.Operation) -> None:
    """Sort manual axes by mesh order; add unused manual axes to in/out replicated."""
    meshes = read_meshes(module)
    for op in nested_ops(module, ir.WalkOrder.PRE_ORDER, {MANUAL_OP}):
        manual = manual_axes_of(op)
        for attr_name in ("in_shardings", "out_shardings"):
            shardings = parse_per_value(str(op.attributes[attr_name]), meshes)
            changed = []
            for s in shardings:
                info = meshes.get(s.mesh)
                if info is None:
                    changed.append(s)
                    continue
                used = {a[0] for d in s.dims for a in d.axes} | {a[0] for a in s.replicated}
                extra = [a for a in manual if a not in used and a in info.sizes]
                if not extra:
                    changed.append(s)
                    continue
                rep = list(s.replicated) + [full_axis(a, info.sizes[a]) for a in extra]
                rep.sort(key=mesh_sort_key(info.order))
                changed.append(s._replace(replicated=tuple(rep)))
            if changed != shardings:
                op.attributes[attr_name] = ir.Attribute.parse(format_per_value(changed),
                                                              op.context)
        if manual:
            order = meshes[next(iter(meshes))].order if meshes else {}
            ordered = sorted(manual, key=lambda a: order.get(a, 0))
            if list(ordered) != list(manual):
                text = "#sdy<manual_axes{" + ", ".join(f'"{a}"' for a in ordered) + "}>"
                op.attributes["manual_axes"] = ir.Attribute.parse(text, op.context)
