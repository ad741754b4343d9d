"""Find and rewrite every sdy sharding in a module, in Shardy's walk order.

Shardings live in three kinds of places: function argument and result
attributes (``sdy.sharding`` inside ``arg_attrs`` / ``res_attrs``), the
``sdy.sharding`` attribute of any op (one sharding per result), and the
sharding attributes of sdy ops themselves (``sharding_constraint``,
``reshard``, ``manual_computation``, collectives ...). Ops are visited in
pre-order; a function's argument then result shardings come before its body,
which is the order Shardy's ``transformShardings`` uses, so passes that name
things in visiting order match Shardy's names.
"""

from __future__ import annotations

from collections.abc import Callable, Container, Iterable
from typing import NamedTuple

from jaxlib.mlir import ir

from shardc.dialects import sdy
from shardc.dialects.sdy import SHARDING_ATTR

FUNC_OP = "func.func"
FUNC_SHARDING_LISTS = ("arg_attrs", "res_attrs")

ShardingFn = Callable[[sdy.TensorShardingAttr], ir.Attribute]


def nested_ops(root: ir.Operation, order: ir.WalkOrder = ir.WalkOrder.PRE_ORDER,
               names: Container[str] | None = None) -> list[ir.Operation]:
    """Every op nested in ``root`` (not ``root`` itself) in walk ``order``; with
    ``names``, only the ops of those names (kept while walking: most steps look
    for a few ops among thousands)."""
    ops: list[ir.Operation] = []

    if names is None:
        def visit(op: ir.Operation) -> ir.WalkResult:
            ops.append(op)
            return ir.WalkResult.ADVANCE
    else:
        def visit(op: ir.Operation) -> ir.WalkResult:
            if op.name in names:
                ops.append(op)
            return ir.WalkResult.ADVANCE

    root.walk(visit, order)
    if names is None:
        # The walk visits ``root`` itself first (pre-order) or last (post-order):
        # dropping it by position spares comparing every op with it (a binding call).
        return ops[1:] if order == ir.WalkOrder.PRE_ORDER else ops[:-1]
    if root.name not in names:
        return ops  # ``root`` is not among them: no op need be compared with it
    return [op for op in ops if op != root]


class Census(NamedTuple):
    """What one walk found in a module: the names of its ops, and whether some op
    has the attribute asked about."""

    names: frozenset[str]
    has_attribute: bool


def census(root: ir.Operation, attribute: str | None = None) -> Census:
    """The names of the ops nested in ``root`` (``root``'s own included), and whether
    one of them has ``attribute``."""
    names: set[str] = set()
    found = False

    if attribute is None:
        def visit(op: ir.Operation) -> ir.WalkResult:
            names.add(op.name)
            return ir.WalkResult.ADVANCE
    else:
        def visit(op: ir.Operation) -> ir.WalkResult:
            nonlocal found
            names.add(op.name)
            if not found and attribute in op.attributes:
                found = True
            return ir.WalkResult.ADVANCE

    root.walk(visit)
    return Census(frozenset(names), found)


def ops_in_preorder(root: ir.Operation) -> list[ir.Operation]:
    """Return every op nested in ``root`` (not ``root`` itself), parents first."""
    return nested_ops(root)


# The attribute names under which ops (sdy's own, and any with sdy.sharding) hold
# shardings. Only these are read: reading any attribute by position makes the
# bindings cast it to a Python type, which aborts the process for attributes
# they cannot cast (complex-valued constants).
_SHARDING_ATTR_NAMES = frozenset({
    SHARDING_ATTR, "sharding", "in_shardings", "out_shardings", "out_sharding",
})


def attribute_names(op: ir.Operation) -> list[str]:
    """Return the names of an op's attributes (inherent and discardable)."""
    # Iterating the map yields names only (half the cost of reading by position).
    return list(op.attributes)


def attribute_dict(op: ir.Operation) -> dict[str, ir.Attribute] | None:
    """An op's attributes by name, or None when the bindings cannot read one of them
    (they raise for a complex-valued dense constant, read by name)."""
    try:
        # One call for them all (reading by name raises the same TypeError).
        return dict(op.attributes.items())
    except TypeError:
        return None


def map_sharding_attr(attr: ir.Attribute, fn: ShardingFn) -> ir.Attribute:
    """Apply ``fn`` to a sharding or to each sharding of a per-value sharding list."""
    if sdy.TensorShardingAttr.isinstance(attr):
        return fn(sdy.TensorShardingAttr(attr))
    if sdy.TensorShardingPerValueAttr.isinstance(attr):
        shardings = sdy.TensorShardingPerValueAttr(attr).shardings
        mapped = [fn(sdy.TensorShardingAttr(s)) for s in shardings]
        if all(new == old for new, old in zip(mapped, shardings)):
            return attr
        return sdy.TensorShardingPerValueAttr.get(mapped)
    if isinstance(attr, ir.ArrayAttr):
        elements = list(ir.ArrayAttr(attr))
        if elements and all(_is_sharding(e) for e in elements):
            return ir.ArrayAttr.get([map_sharding_attr(e, fn) for e in elements])
    return attr


def _is_sharding(attr: ir.Attribute) -> bool:
    return sdy.TensorShardingAttr.isinstance(attr) or sdy.TensorShardingPerValueAttr.isinstance(
        attr
    )


def _map_func_shardings(func: ir.Operation, list_name: str, fn: ShardingFn,
                        mapped: dict[ir.Attribute, ir.Attribute]) -> None:
    if list_name not in func.attributes:
        return
    entries = list(ir.ArrayAttr(func.attributes[list_name]))
    new_entries = []
    for entry in entries:
        # Arguments mostly share a few uniqued dictionaries: each is mapped once.
        new = mapped.get(entry)
        if new is None:
            new = mapped[entry] = _map_func_entry(entry, fn)
        new_entries.append(new)
    if any(new != old for new, old in zip(new_entries, entries)):
        func.attributes[list_name] = ir.ArrayAttr.get(new_entries)


def _map_func_entry(entry: ir.Attribute, fn: ShardingFn) -> ir.Attribute:
    entries = ir.DictAttr(entry)
    if SHARDING_ATTR not in entries:
        return entry
    values = {entries[i].name: entries[i].attr for i in range(len(entries))}
    values[SHARDING_ATTR] = map_sharding_attr(values[SHARDING_ATTR], fn)
    return ir.DictAttr.get(values)


def _candidate_attrs(op: ir.Operation) -> list[tuple[str, ir.Attribute]]:
    """The op's own attributes that may hold shardings, with their names (unchecked)."""
    attributes = op.attributes
    if not op.name.startswith("sdy."):
        # Only ``sdy.sharding`` can hold one: one lookup instead of reading every
        # attribute's name (a binding call each).
        if SHARDING_ATTR in attributes:
            return [(SHARDING_ATTR, attributes[SHARDING_ATTR])]
        return []
    return [(name, attributes[name]) for name in attributes if name in _SHARDING_ATTR_NAMES]


def sharding_attr_names(op: ir.Operation) -> list[str]:
    """Names of the op's own attributes that hold shardings (not func arg/result ones)."""
    return [name for name, attr in _candidate_attrs(op) if _holds_sharding(attr)]


def _holds_sharding(attr: ir.Attribute) -> bool:
    if _is_sharding(attr):
        return True
    if isinstance(attr, ir.ArrayAttr):
        elements = list(ir.ArrayAttr(attr))
        return bool(elements) and all(_is_sharding(e) for e in elements)
    return False


def map_shardings(module: ir.Operation, fn: ShardingFn) -> None:
    """Replace every sharding ``s`` in ``module`` by ``fn(s)``, in Shardy's order.

    ``fn`` must map equal shardings to equal results: it is called once per
    distinct sharding, in the order the shardings are first met. Attributes
    are uniqued, so a module holds few distinct ones however large it is.
    """
    mapper = ShardingMapper(fn)
    for op in ops_in_preorder(module):
        mapper.map_op(op)


class ShardingMapper:
    """What ``map_shardings`` does to one op at a time, for a caller that found the
    ops (and their sharding attributes) itself: each distinct sharding, and each
    distinct attribute holding some, is mapped once."""

    def __init__(self, fn: ShardingFn) -> None:
        self._fn = fn
        self._memo: dict[ir.Attribute, ir.Attribute] = {}
        # Whole attributes (a per-value list, say) are mapped once too.
        self._mapped: dict[ir.Attribute, ir.Attribute] = {}

    def _once(self, sharding: sdy.TensorShardingAttr) -> ir.Attribute:
        result = self._memo.get(sharding)
        if result is None:
            result = self._memo[sharding] = self._fn(sharding)
        return result

    def map_op(self, op: ir.Operation) -> None:
        """Map the shardings of ``op``: a function's argument and result ones, its own."""
        if op.name == FUNC_OP:
            self.map_func_io(op)
        for name, attr in _candidate_attrs(op):
            self.map_attr(op, name, attr)

    def map_func_io(self, func: ir.Operation) -> None:
        """Map the shardings of ``func``'s arguments and results."""
        for list_name in FUNC_SHARDING_LISTS:
            _map_func_shardings(func, list_name, self._once, self._mapped)

    def map_attr(self, op: ir.Operation, name: str, attr: ir.Attribute) -> None:
        """Map ``attr``, ``op``'s attribute ``name``, and set the result if it differs."""
        self.map_attrs(((op, attr),), name)

    def map_attrs(self, found: Iterable[tuple[ir.Operation, ir.Attribute]], name: str) -> None:
        """``map_attr`` on each op and its attribute ``name`` (one call for many ops)."""
        mapped, once = self._mapped, self._once
        for op, attr in found:
            new = mapped.get(attr)
            if new is None:
                # An attribute holding no sharding maps to itself.
                new = mapped[attr] = map_sharding_attr(attr, once)
            if new != attr:
                op.attributes[name] = new


def mesh_name_of(sharding: sdy.TensorShardingAttr) -> str | None:
    """The mesh symbol a sharding refers to, or None for an inline mesh."""
    mesh_or_ref = sharding.mesh_or_ref
    if isinstance(mesh_or_ref, ir.FlatSymbolRefAttr):
        return mesh_or_ref.value
    return None


def used_mesh_names(module: ir.Operation) -> set[str]:
    """The mesh symbols some sharding of ``module`` refers to."""
    used: set[str] = set()

    def note(sharding: sdy.TensorShardingAttr) -> ir.Attribute:
        name = mesh_name_of(sharding)
        if name is not None:
            used.add(name)
        return sharding

    map_shardings(module, note)
    return used


def erase_unused_meshes(module: ir.Operation, among: Container[str] | None = None) -> None:
    """Erase the mesh symbols of ``module`` (those named in ``among``, when given) that
    no sharding refers to any more."""
    used = used_mesh_names(module)
    for op in list(module.regions[0].blocks[0].operations):
        if op.operation.name != "sdy.mesh":
            continue
        name = ir.StringAttr(op.operation.attributes["sym_name"]).value
        if name not in used and (among is None or name in among):
            op.operation.erase()
