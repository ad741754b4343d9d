"""Conflict points of a propagated module and the alternatives worth trying at each.

A *conflict point* is an op at which the cost model predicts an implicit
collective (``shardc.compiler.cost.op_comm``): its operands disagree with
what its result sharding needs, or a reduction factor stays sharded. The
alternatives are *pins*: a closed sharding for one op result, written on
the op before propagation, so that re-propagation settles the rest:

* ``follow operand i``: the result takes the sharding operand ``i``'s
  factors give it (for a dot, follow lhs or rhs; for an elementwise op,
  follow operand 0 or 1);
* ``unshard dim d``: the result without the axes of dimension ``d`` (for a
  dot whose operands are contracting-sharded: keep partial sums and
  all-reduce instead of gathering an operand);
* ``producer follows``: the op producing operand ``i`` takes the sharding
  the conflict op needs of it, so the reshard moves upstream, or vanishes.

Candidates are deduplicated, Shardy's own sharding excluded, in this order.
"""

from __future__ import annotations

from dataclasses import dataclass

from jaxlib.mlir import ir

from shardc.compiler.cost.op_comm import op_communication
from shardc.compiler.propagation.projection import AXES, project
from shardc.compiler.propagation.values import ModuleValues
from shardc.compiler.sharding.tensor import DimSharding, TensorSharding, format_per_value
from shardc.dialects.sdy import SHARDING_ATTR

# Ops whose result must not be pinned: user-fixed or structural.
_SKIP = frozenset({
    "func.func", "func.return", "func.call", "sdy.sharding_constraint", "sdy.reshard",
    "sdy.manual_computation", "sdy.data_flow_edge", "sdy.func_data_flow_edge",
    "sdy.sharding_group", "sdy.propagation_barrier", "stablehlo.while", "stablehlo.case",
    "stablehlo.if", "stablehlo.return", "sdy.return", "stablehlo.constant",
})


@dataclass(frozen=True)
class Pin:
    """Fix result ``result`` of op ``op`` (its ``TAG`` id) to ``sharding`` (closed)."""

    op: int
    result: int
    sharding: TensorSharding
    why: str

    def key(self) -> tuple:
        return (self.op, self.result, tuple(d.axes for d in self.sharding.dims))


@dataclass(frozen=True)
class ConflictPoint:
    """One op with predicted implicit communication, its bytes and alternatives."""

    op: int
    tag: int | None
    name: str
    bytes_per_device: int
    alternatives: tuple[Pin, ...]


def closed(mesh: str, dims_axes) -> TensorSharding:
    """A closed sharding with the given axes per dimension."""
    return TensorSharding(mesh, tuple(DimSharding(tuple(a), True) for a in dims_axes))


def _dedupe_axes(dims_axes: list[list]) -> list[tuple]:
    seen = set()
    out = []
    for axes in dims_axes:
        kept = []
        for axis in axes:
            if axis not in seen:
                seen.add(axis)
                kept.append(axis)
        out.append(tuple(kept))
    return out


def follow_operand(rule, operand: TensorSharding, index: int, result_index: int = 0):
    """Per result dimension, the axes operand ``index`` gives its factors (None: n/a)."""
    mapping = rule.operand_mappings[index]
    if len(operand.dims) != len(mapping):
        return None
    proj = project(operand, mapping, rule.factor_sizes)
    dims = []
    for dim_factors in rule.result_mappings[result_index]:
        axes: list = []
        for factor in dim_factors:
            record = proj.factors.get(factor)
            if record is not None:
                axes.extend(record[AXES])
        dims.append(axes)
    return _dedupe_axes(dims)


TAG = "shardc.cost_aware_id"


def tag_ops(module: ir.Operation) -> None:
    """Number every op with results (attribute ``TAG``), to find it again in copies."""
    count = 0
    i32 = ir.IntegerType.get_signless(32)

    def visit(op: ir.Operation) -> ir.WalkResult:
        nonlocal count
        if len(op.results) and op.name != "func.func":
            op.attributes[TAG] = ir.IntegerAttr.get(i32, count)
            count += 1
        return ir.WalkResult.ADVANCE

    module.walk(visit)


def tagged_ops(module: ir.Operation) -> list[tuple[int, ir.Operation]]:
    """Every op ``tag_ops`` numbered in ``module`` (a copy, say), with its number."""
    found: list[tuple[int, ir.Operation]] = []

    def visit(op: ir.Operation) -> ir.WalkResult:
        if TAG in op.attributes:
            found.append((ir.IntegerAttr(op.attributes[TAG]).value, op))
        return ir.WalkResult.ADVANCE

    module.walk(visit)
    return found


def apply_pins(module: ir.Operation, pins: list[Pin]) -> None:
    """Write each pin as the closed ``sdy.sharding`` of its op (graph indices of ``module``)."""
    if not pins:
        return
    wanted = {pin.op: pin for pin in pins}
    for tag, op in tagged_ops(module):
        pin = wanted.get(tag)
        if pin is not None:
            op.attributes[SHARDING_ATTR] = ir.Attribute.parse(format_per_value([pin.sharding]))


def ops_by_tag(module: ir.Operation) -> dict[int, list[ir.Operation]]:
    """``tagged_ops(module)`` by number."""
    found: dict[int, list[ir.Operation]] = {}
    for tag, op in tagged_ops(module):
        found.setdefault(tag, []).append(op)
    return found


def pinned_clone(module: ir.Operation, ops: dict[int, list[ir.Operation]],
                 pins: list[Pin]) -> ir.Operation:
    """A clone of ``module`` with ``pins`` applied (``apply_pins``), ``module`` unchanged.

    ``ops`` is ``ops_by_tag(module)``, read once by the caller: the pins are
    written on ``module``'s own ops for the clone and taken back after it,
    instead of searching every clone for the pinned ops.
    """
    wanted = {pin.op: pin for pin in pins}
    before: list[tuple[ir.Operation, ir.Attribute | None]] = []
    try:
        for tag, pin in wanted.items():
            for op in ops.get(tag, ()):
                attributes = op.attributes
                before.append((op, attributes[SHARDING_ATTR]
                               if SHARDING_ATTR in attributes else None))
                attributes[SHARDING_ATTR] = ir.Attribute.parse(
                    format_per_value([pin.sharding]), module.context)
        return module.clone()
    finally:
        for op, attribute in reversed(before):
            if attribute is None:
                del op.attributes[SHARDING_ATTR]
            else:
                op.attributes[SHARDING_ATTR] = attribute


def strip_tags(module: ir.Operation) -> None:
    """Remove the ``TAG`` attributes ``tag_ops`` added."""
    def visit(op: ir.Operation) -> ir.WalkResult:
        attributes = op.attributes
        if TAG in attributes:
            del attributes[TAG]
        return ir.WalkResult.ADVANCE

    module.walk(visit)


def op_tags(facts: dict, graph) -> list[int | None]:
    """Every op's number (``TAG``, None without) by graph index: read once into ``facts``
    (the ``ModuleValues.facts`` of a reader of ``graph``)."""
    tags = facts.get(TAG)
    if tags is None:
        tags = facts[TAG] = []
        for op in graph.ops:
            attributes = op.attributes
            tags.append(ir.IntegerAttr(attributes[TAG]).value if TAG in attributes else None)
    return tags


def tag_of(reader: ModuleValues, op: int) -> int | None:
    return op_tags(reader.facts, reader.graph)[op]


def _pinnable(reader: ModuleValues, op: int) -> bool:
    graph = reader.graph
    name = graph.op_name[op]
    if name in _SKIP or len(graph.op_results[op]) != 1 or graph.op_blocks[op]:
        return False
    if tag_of(reader, op) is None:
        return False
    return graph.value_shape[graph.op_results[op][0]] is not None


def conflict_points(reader: ModuleValues, *, per_point: int = 6) -> list[ConflictPoint]:
    """Every op with predicted implicit collectives, in program order."""
    graph = reader.graph
    points = []
    for op in range(len(graph.ops)):
        if not graph.op_results[op] or graph.op_blocks[op] or graph.op_name[op] in _SKIP:
            continue
        if not _needs_bytes(reader, op):
            continue
        found = communication_needs(reader, op)
        if found is None:
            continue
        rule, operands, results, needs = found
        total = sum(n.collective.bytes_per_device for n in needs)
        if not total:
            continue
        pins = _alternatives(reader, op, rule, operands, results, needs)[:per_point]
        points.append(ConflictPoint(op, tag_of(reader, op), graph.op_name[op], total,
                                    tuple(pins)))
    return points


def _needs_bytes(reader: ModuleValues, op: int) -> int:
    """The bytes of the collectives ``communication_needs`` finds at ``op`` (0: none),
    memoised by ``reader.op_key`` across the copies of one module (most ops of a
    state and of the next are the same op with the same shardings)."""
    key = reader.op_key(op)
    total = reader.costs.conflicts.get(key) if key is not None else None
    if total is None:
        found = communication_needs(reader, op)
        total = sum(n.collective.bytes_per_device for n in found[3]) if found else 0
        if key is not None:
            reader.costs.conflicts[key] = total
    return total


def communication_needs(reader: ModuleValues, op: int):
    """``(rule, operands, results, needs)`` of an op whose tensors are all sharded, else None.

    ``needs`` are the collectives the op itself requires (``op_communication``),
    computed on the program's mesh so partly sharded contractions are priced
    as XLA compiles them.
    """
    ruled = reader.rule_tensors(op)
    if ruled is None:
        return None
    rule, operands, results = ruled
    if any(t.sharding is None for t in operands + results):
        return None
    mesh = reader.mesh_of(*(t.sharding for t in results + operands))
    return rule, operands, results, op_communication(rule, operands, results, mesh,
                                                     op_name=reader.graph.op_name[op])


def same_mesh(reader: ModuleValues, first: str, second: str) -> bool:
    """Whether two mesh symbols name the same mesh (the same axes, sizes and devices):
    only then do one's axes mean anything in a sharding on the other (a program may
    mix meshes of other axis names over the same devices, as libraries' shardings do)."""
    if first == second:
        return True
    meshes = reader.meshes
    return first in meshes and second in meshes and meshes[first].key == meshes[second].key


def _alternatives(reader, op, rule, operands, results, needs) -> list[Pin]:
    graph = reader.graph
    pins: list[Pin] = []
    seen = set()

    def add(pin: Pin, current: TensorSharding) -> None:
        if tuple(d.axes for d in current.dims) == tuple(d.axes for d in pin.sharding.dims):
            return
        if pin.key() not in seen:
            seen.add(pin.key())
            pins.append(pin)

    result = results[0].sharding
    mesh = result.mesh
    if _pinnable(reader, op):
        for i, operand in enumerate(operands):
            if not same_mesh(reader, operand.sharding.mesh, mesh):
                continue
            dims = follow_operand(rule, operand.sharding, i)
            if dims is not None:
                add(Pin(tag_of(reader, op), 0, closed(mesh, dims), f"follow operand {i}"), result)
        for d, dim in enumerate(result.dims):
            if dim.axes:
                dims = [() if k == d else x.axes for k, x in enumerate(result.dims)]
                add(Pin(tag_of(reader, op), 0, closed(mesh, dims), f"unshard result dim {d}"),
                    result)
    for need in needs:
        if need.operand is None or need.target is None:
            continue
        value = graph.op_operands[op][need.operand]
        producer = graph.value_def[value]
        if producer < 0 or not _pinnable(reader, producer):
            continue
        current = reader.sharding(value)
        if current is None or not same_mesh(reader, current.mesh, mesh):
            continue
        add(Pin(tag_of(reader, producer), 0, closed(current.mesh, need.target),
                f"producer of operand {need.operand} follows"), current)
    return pins
