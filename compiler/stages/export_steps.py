"""Export steps of the propagation pipeline, one small function each.

``constant_or_scalar_merger`` undoes the import split where the copies ended
up with equal attributes; ``remove_sharding_groups`` and
``sharding_constraint_to_reshard`` drop/convert propagation-only ops;
``update_non_divisible_io_shardings`` and ``remove_sub_axes_in_io_shardings``
tidy function boundaries; ``close_shardings`` removes every ``?`` and every
``replicated=`` list; ``drop_sharding_rules`` strips cached rules. Sinking
data-flow edges lives in ``data_flow_edges``.
"""

from __future__ import annotations

from collections.abc import Callable
from math import gcd

from jaxlib.mlir import ir

from shardc.compiler.propagation.graph import NEVER_DEAD, PropagationGraph
from shardc.compiler.propagation.ir_access import ShardingStore, read_meshes
from shardc.compiler.sharding.rules import is_bookkeeping
from shardc.compiler.sharding.tensor import (
    DimSharding,
    MeshInfo,
    TensorSharding,
    format_sharding,
    parse_sharding,
)
from shardc.compiler.sharding.walker import map_shardings, nested_ops
from shardc.compiler.stages.hlo_order import take_earlier_place
from shardc.compiler.stages.import_steps import is_constant_expression
from shardc.dialects import sdy
from shardc.dialects.sdy import SHARDING_ATTR, SHARDING_RULE_ATTR


class _AttrKeys:
    """The key an op merges by: its attributes but shardc's bookkeeping (copies
    numbered apart by the cost-aware search are still copies) as a tuple sorted by
    name, or, where the bindings cannot read one (a complex value), the op's
    printed generic form without its result name.

    Ops of one kind list the same few names: which of them count, and in what
    order, is worked out once per list of names. The attributes are read in one
    call (half the cost of listing the names, then reading each).
    """

    def __init__(self) -> None:
        self.counted: dict[tuple[str, ...], tuple[int, ...]] = {}

    def of(self, op: ir.Operation) -> tuple | str:
        try:
            items = op.attributes.items()
        except TypeError:
            text = op.get_asm(print_generic_op_form=True, assume_verified=True)
            return text.split(" = ", 1)[1] if text.lstrip().startswith("%") else text
        names = tuple([name for name, _ in items])
        counted = self.counted.get(names)
        if counted is None:
            counted = self.counted[names] = tuple(sorted(
                (k for k, name in enumerate(names) if not is_bookkeeping(name)),
                key=names.__getitem__))
        return tuple([items[k] for k in counted])


MERGED = frozenset({"sdy.constant", "stablehlo.constant", "stablehlo.broadcast_in_dim"})


def constant_or_scalar_merger(module: ir.Operation,
                              copies: list[ir.Operation] | None = None) -> list[ir.Operation]:
    """Merge constants and scalar broadcasts whose attributes (shardings too) are equal.

    Only copies in one block merge: the kept op must dominate every use it
    takes over, and the regions of a ``while`` or ``case`` share a parent op
    but not a block. ``copies``: the ops named in ``MERGED`` in the module's
    functions, in post-order, when a walk the caller made anyway found them.
    Returns the ops it erased.
    """
    if copies is None:
        copies = [op for func in _funcs(module)
                  for op in nested_ops(func, ir.WalkOrder.POST_ORDER, MERGED)]
    # Types are uniqued and few: each is asked its rank once.
    scalar_types: dict[ir.Type, bool] = {}
    keys = _AttrKeys()
    # Keys hold the block: copies of different functions never merge.
    constants: dict = {}
    broadcasts: dict = {}
    erased: list[ir.Operation] = []
    for op in copies:
        if op.name != "stablehlo.broadcast_in_dim":
            key = (keys.of(op), op.block)
            cache = constants
        else:
            operand = op.operands[0]
            operand_type = operand.type
            if operand_type not in scalar_types:
                scalar_types[operand_type] = _rank(operand) == 0
            if not scalar_types[operand_type]:
                continue
            key = (keys.of(op), op.block, op.result.type, operand)
            cache = broadcasts
        kept = cache.setdefault(key, op)
        if kept is not op:
            take_earlier_place(kept, op)
            op.result.replace_all_uses_with(kept.result)
            op.erase()
            erased.append(op)
    return erased


def _funcs(module: ir.Operation) -> list[ir.Operation]:
    return [op.operation for op in module.regions[0].blocks[0].operations
            if op.operation.name == "func.func"]


def _rank(value: ir.Value) -> int:
    return ir.ShapedType(value.type).rank if isinstance(value.type, ir.ShapedType) else 0


def remove_sharding_groups(module: ir.Operation) -> None:
    """Erase every ``sdy.sharding_group``, pinning the constants in one.

    XLA's import splits constant expressions (an iota, ops of constants) again and
    drops the shardings written on them, re-deriving them from their users and
    sharding groups; without the group, a constant read only by an op XLA does not
    propagate through (``inspect_array_sharding``'s custom call) comes back
    replicated. A closed constraint to the sharding propagation resolved for the
    group keeps it, as the group does under jax.jit.
    """
    pinned: set[ir.Value] = set()
    for op in nested_ops(module, ir.WalkOrder.POST_ORDER, {"sdy.sharding_group"}):
        value = op.operands[0]
        op.erase()
        if value not in pinned and is_constant_expression(value):
            pinned.add(value)
            _pin(value)


def _pin(value: ir.Value) -> None:
    """Follow ``value`` by a closed constraint to its sharding, for all its users."""
    sharding = sdy.value_sharding(value)
    if sharding is None:
        return
    producer = value.owner.operation if hasattr(value.owner, "operation") else value.owner
    with value.context:
        constraint = sdy.ShardingConstraintOp(
            value, closed(sdy.TensorShardingAttr(sharding)), loc=producer.location,
            ip=ir.InsertionPoint.after(producer))
    value.replace_all_uses_except(constraint.result, constraint.operation)


def sharding_constraint_to_reshard(module: ir.Operation) -> None:
    """Replace each ``sdy.sharding_constraint`` by an ``sdy.reshard`` of its sharding."""
    with module.context:
        for op in nested_ops(module, ir.WalkOrder.PRE_ORDER, {"sdy.sharding_constraint"}):
            reshard = sdy.ReshardOp(op.operands[0], op.attributes["sharding"],
                                    ip=ir.InsertionPoint(op), loc=op.location)
            op.results[0].replace_all_uses_with(reshard.result)
            op.erase()


# ------------------------------------------------------------------ function boundaries
def divisible_dim(dim: DimSharding, size: int, mesh: MeshInfo) -> DimSharding:
    """The longest prefix of ``dim``'s axes that divides ``size`` (a sub-axis may end it)."""
    remaining = size
    axes = []
    for axis in dim.axes:
        g = gcd(remaining, axis[2]) if remaining else axis[2]
        if g == axis[2]:
            axes.append(axis)
            remaining = remaining // axis[2] if remaining else 0
            continue
        if g > 1:
            axes.append(type(axis)(axis[0], axis[1], g, axis[3]))
        break
    if len(axes) == len(dim.axes) and tuple(axes) == dim.axes:
        return dim
    return DimSharding(tuple(axes), dim.closed)


def _map_func_io(func: ir.Operation, meshes: dict[str, MeshInfo], fn,
                 parse: Callable[[ir.Attribute], TensorSharding] | None = None) -> None:
    func_type = ir.FunctionType(ir.TypeAttr(func.attributes["function_type"]).value)
    # Attributes and types are uniqued, and a function's arguments mostly share a few
    # shardings and shapes: each pair is fixed once (None: unchanged).
    fixed: dict[tuple[ir.Attribute, ir.Type], ir.Attribute | None] = {}

    def fix(attr: ir.Attribute, type_: ir.Type) -> ir.Attribute | None:
        key = (attr, type_)
        if key not in fixed:
            sharding = parse(attr) if parse is not None else parse_sharding(str(attr), meshes)
            shape = ir.ShapedType(type_).shape if isinstance(type_, ir.ShapedType) else []
            new = fn(sharding, shape)
            fixed[key] = None if new == sharding else ir.Attribute.parse(
                format_sharding(new), func.context)
        return fixed[key]

    for list_name, types in (("arg_attrs", func_type.inputs), ("res_attrs", func_type.results)):
        if list_name not in func.attributes:
            continue
        entries = list(ir.ArrayAttr(func.attributes[list_name]))
        changed = False
        for k, entry in enumerate(entries):
            d = ir.DictAttr(entry)
            if SHARDING_ATTR not in d or k >= len(types):
                continue
            new = fix(d[SHARDING_ATTR], types[k])
            if new is not None:
                values = {d[i].name: d[i].attr for i in range(len(d))}
                values[SHARDING_ATTR] = new
                entries[k] = ir.DictAttr.get(values, context=func.context)
                changed = True
        if changed:
            func.attributes[list_name] = ir.ArrayAttr.get(entries, context=func.context)


def _divisible(meshes: dict[str, MeshInfo]):
    """Cut a sharding's dims to the axes that divide the dimension (``fix`` for
    ``_map_func_io``)."""
    def fix(sharding: TensorSharding, shape) -> TensorSharding:
        mesh = meshes.get(sharding.mesh)
        if mesh is None:
            return sharding
        dims = tuple(divisible_dim(d, s, mesh) for d, s in zip(sharding.dims, shape))
        return sharding._replace(dims=dims)

    return fix


def _without_sub_axes(sharding: TensorSharding, shape) -> TensorSharding:
    """On open dims, drop everything from the first sub-axis on."""
    dims = []
    for dim in sharding.dims:
        if dim.closed:
            dims.append(dim)
            continue
        cut = next((i for i, a in enumerate(dim.axes) if a[2] != a[3]), len(dim.axes))
        dims.append(dim if cut == len(dim.axes) else DimSharding(dim.axes[:cut], False))
    return sharding._replace(dims=tuple(dims))


def update_non_divisible_io_shardings(module: ir.Operation) -> None:
    """Cut function argument/result dims to the axes that divide the dimension."""
    meshes = read_meshes(module)
    fix = _divisible(meshes)
    for func in _funcs(module):
        _map_func_io(func, meshes, fix)


def remove_sub_axes_in_io_shardings(module: ir.Operation, main: ir.Operation | None) -> None:
    """On the main function's open dims, drop everything from the first sub-axis on."""
    if main is None:
        return
    _map_func_io(main, read_meshes(module), _without_sub_axes)


def fix_io_shardings(module: ir.Operation, main: ir.Operation | None,
                     store: ShardingStore | None = None) -> None:
    """``update_non_divisible_io_shardings`` then ``remove_sub_axes_in_io_shardings``
    on ``main``, each function boundary read and written once; ``store``: the one
    that wrote the module's function boundaries back, where the shardings there
    are already parsed (with the module's meshes)."""
    meshes = read_meshes(module) if store is None else store.meshes
    parse = None if store is None else store.parsed
    divisible = _divisible(meshes)

    def both(sharding: TensorSharding, shape) -> TensorSharding:
        return _without_sub_axes(divisible(sharding, shape), shape)

    for func in _funcs(module):
        _map_func_io(func, meshes, both if main is not None and func == main else divisible,
                     parse)


def closed(attr: sdy.TensorShardingAttr) -> ir.Attribute:
    """``attr`` with every dimension closed and no replicated list (priorities, unreduced
    kept)."""
    dims = [sdy.DimensionShardingAttr(d) for d in attr.dimension_shardings]
    if all(d.is_closed for d in dims) and not list(attr.replicated_axes):
        return attr
    dims = [sdy.DimensionShardingAttr.get(list(d.axes), True, d.priority) for d in dims]
    return sdy.TensorShardingAttr.get(attr.mesh_or_ref, dims, [], list(attr.unreduced_axes))


def close_shardings(module: ir.Operation) -> None:
    """Close every dimension and drop every replicated list (priorities, unreduced kept)."""
    # map_shardings closes each distinct (uniqued) sharding once.
    with module.context:
        map_shardings(module, closed)


def erase_dead_ops(module: ir.Operation) -> None:
    """Erase unused effect-free ops, as the export canonicalizer's driver does."""
    # Propagation already erased the ops it left dead, so usually nothing is:
    # the whole graph is built only when some op has no used result.
    if not _has_unused_op(module):
        return
    graph = PropagationGraph(module)
    changed = True
    while changed:
        changed = False
        for op in reversed(range(len(graph.ops))):
            if not graph.erased[op] and graph.is_trivially_dead(op):
                for dead in graph.erase_order(op):
                    graph.drop_uses_of(dead)
                graph.ops[op].erase()
                changed = True


def _has_unused_op(module: ir.Operation) -> bool:
    """Whether some op that could be dead (not a terminator, function or mesh) has no
    used result: what ``PropagationGraph.is_trivially_dead`` requires first."""
    found = False

    def visit(op: ir.Operation) -> ir.WalkResult:
        nonlocal found
        if op.name in NEVER_DEAD:
            return ir.WalkResult.ADVANCE
        for result in op.results:
            if next(iter(result.uses), None) is not None:
                return ir.WalkResult.ADVANCE
        # The trait last: dearer to ask than the uses, and most ops have a used result.
        if op.has_trait(ir.IsTerminatorTrait):
            return ir.WalkResult.ADVANCE
        found = True
        return ir.WalkResult.INTERRUPT

    module.walk(visit)
    return found


def drop_sharding_rules(module: ir.Operation) -> None:
    """Remove every non-custom ``sdy.sharding_rule``."""
    for op in nested_ops(module, ir.WalkOrder.PRE_ORDER):
        attrs = op.attributes
        if SHARDING_RULE_ATTR in attrs and not sdy.OpShardingRuleAttr(attrs[SHARDING_RULE_ATTR]).is_custom:
            del attrs[SHARDING_RULE_ATTR]
