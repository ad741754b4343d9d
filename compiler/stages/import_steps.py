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
    Census,
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
def _to_sdy_constant(op: ir.Operation) -> ir.Operation:
    """Replace a ``stablehlo.constant`` by an ``sdy.constant``; return the new op."""
    attrs = attribute_dict(op)
    result = op.result
    if attrs is None:
        new = _renamed_through_text(op, "sdy.constant")
    else:
        new = ir.Operation.create("sdy.constant", results=[result.type],
                                  attributes=attrs, loc=op.location, ip=ir.InsertionPoint(op))
    result.replace_all_uses_with(new.result)
    op.erase()
    return new


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


# Ops that make a constant of constant operands.
_PURE_PRESERVING = _CONSTANT_PRESERVING | (ELEMENTWISE - _EFFECTFUL)
_CONSTANT_SOURCES = frozenset({"sdy.constant", "stablehlo.iota"})
_GROUP_OP = "sdy.sharding_group"


def is_constant_expression(value: ir.Value) -> bool:
    """Whether ``value`` is made of constants only (a constant, an iota, or an op of the
    kinds the splitter copies, of such values): what the constant splitter copies."""
    owner = value.owner
    if isinstance(owner, ir.Block):
        return False
    op = owner.operation if hasattr(owner, "operation") else owner
    if op.name in _CONSTANT_SOURCES or op.name == "stablehlo.constant":
        return True
    return op.name in _PURE_PRESERVING and all(
        is_constant_expression(operand) for operand in op.operands)


class _Split:
    """The constants (and ops of constants only) and scalar broadcasts of a module found
    so far, in walk order, with what cloning them reads.

    Every split value maps to its op and the op's operands, read once when the op
    is classified: cloning a value many times then costs no binding calls to find
    them again. Operands are looked up by value (cheaper through the bindings than
    by defining op). Every op split has one result (constants, iotas, elementwise
    and shape ops).
    """

    def __init__(self, has_groups: bool) -> None:
        self.constants: dict[ir.Operation, ir.Value] = {}  # op -> result, in order
        self.expansions: dict[ir.Operation, ir.Value] = {}
        self.constant_values: set[ir.Value] = set()
        # Results of both: value -> (op, operands).
        self.sources: dict[ir.Value, tuple[ir.Operation, list[ir.Value]]] = {}
        # Without any sdy.sharding_group in the module, no value is in one.
        self.has_groups = has_groups
        self.groups: dict[ir.Value, list[ir.Operation]] = {}  # see _clone
        self.scalar_types: dict[ir.Type, bool] = {}

    def is_scalar(self, value: ir.Value) -> bool:
        # Types are uniqued and few: each is asked its rank once.
        type_ = value.type
        scalar = self.scalar_types.get(type_)
        if scalar is None:
            scalar = self.scalar_types[type_] = _is_scalar(value)
        return scalar

    def add_constant(self, op: ir.Operation, operands: list[ir.Value]) -> None:
        result = self.constants[op] = op.result
        self.sources[result] = (op, operands)
        self.constant_values.add(result)

    def add_expansion(self, op: ir.Operation, operands: list[ir.Value]) -> None:
        result = self.expansions[op] = op.result
        self.sources[result] = (op, operands)

    def process(self, op: ir.Operation, name: str) -> None:
        """Classify ``op`` (named ``name``) or give each of its non-scalar constant
        operands its own copy."""
        if name == _GROUP_OP:
            return
        if name == "stablehlo.constant":
            self.add_constant(_to_sdy_constant(op), [])
            return
        if name in _CONSTANT_SOURCES:
            self.add_constant(op, [])
            return
        operands = list(op.operands)
        if name in _PURE_PRESERVING and self.constant_values.issuperset(operands):
            self.add_constant(op, operands)
            return
        if name == "stablehlo.broadcast_in_dim" and self.is_scalar(operands[0]):
            self.add_expansion(op, operands)
            return
        sources = self.sources
        for k, operand in enumerate(operands):
            if operand in sources and not self.is_scalar(operand):
                mapping: dict[ir.Value, ir.Value] = {}
                self.clone(operand, mapping)
                op.operands[k] = mapping[operand]

    def clone(self, result: ir.Value, mapping: dict[ir.Value, ir.Value]) -> None:
        """Clone the ops computing ``result`` (``mapping``: original value -> copy) and
        the sharding groups ``result`` is in (found once per value, as copies only ever
        take uses away from the original).

        A constant's operands are constants and an expansion's is a scalar, which is
        never cloned: every operand to clone is a split value.
        """
        if result in mapping or self.is_scalar(result):
            return
        op, operands = self.sources[result]
        for operand in operands:
            if operand in self.sources:
                self.clone(operand, mapping)
        copy = op.clone(ip=ir.InsertionPoint(op))
        if operands:
            copy_operands = copy.operands
            for k, operand in enumerate(operands):
                if operand in mapping:
                    copy_operands[k] = mapping[operand]
        mapping[result] = copy.result
        if not self.has_groups:
            return
        if result not in self.groups:
            self.groups[result] = [use.owner for use in result.uses
                                   if use.owner.name == _GROUP_OP]
        for group in self.groups[result]:
            group_copy = group.clone(ip=ir.InsertionPoint(op))
            group_copy.operands[0] = mapping[result]

    def erase_unused(self) -> None:
        for op, result in [*self.expansions.items(), *reversed(self.constants.items())]:
            if not self.has_groups:
                # Its users are not sharding groups (none is): it goes if it has none.
                if next(iter(result.uses), None) is None:
                    op.erase()
                continue
            # Reading a user (an op view made per use) costs more than its use.
            users = [use.owner for use in result.uses]
            if all(u.name == _GROUP_OP for u in users):
                for user in users:
                    user.erase()
                op.erase()


def constant_or_scalar_splitter(module: ir.Operation) -> Census:
    """Turn constants into ``sdy.constant`` and give every non-constant use its own copy.

    Returns the names of the ops the module held, and of the ``sdy.constant`` it
    holds now: the steps after this one look there for the ops they rewrite.
    """
    with module.context:
        ops: list[ir.Operation] = []
        names: list[str] = []

        def visit(op: ir.Operation) -> ir.WalkResult:
            ops.append(op)
            names.append(op.name)
            return ir.WalkResult.ADVANCE

        module.walk(visit, ir.WalkOrder.PRE_ORDER)
        # Values of different functions never meet: one pass over the whole module
        # splits each function as a pass per function would. ``module`` itself, met
        # first, is not split.
        nested = set(names[1:])
        split = _Split(has_groups=_GROUP_OP in nested)
        for op, name in zip(ops[1:], names[1:]):
            split.process(op, name)
        split.erase_unused()
    return Census(frozenset(nested | {"sdy.constant"}), False)


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
