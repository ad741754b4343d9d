"""Data-flow edges: adding ``sdy.data_flow_edge`` ops and sinking them back.

``add_data_flow_edges`` puts an edge after every *owner* of a shardable
data-flow op (results of while/case/optimization_barrier/named and manual
computations; body arguments of named and manual computations), copies the
owner's sharding onto it and redirects the owner's other uses to it.
``sink_data_flow_edges`` copies edge shardings back to the owners (open
placeholders for siblings without one) and replaces each edge by its input.
The IR edits are the bindings' counterparts of Shardy's rewriter calls, made
in the same order (post-order walk, owners reversed), so use-lists, and with
them the propagation worklist, come out as native's.
"""

from __future__ import annotations

from jaxlib.mlir import ir

from shardc.compiler.propagation import manual
from shardc.compiler.propagation.data_flow_ops import BLOCK_ARG_OWNER_OPS, DATA_FLOW_OPS
from shardc.compiler.propagation.ir_access import EDGE_OP, read_meshes
from shardc.compiler.sharding.tensor import (
    MeshInfo,
    TensorSharding,
    format_per_value,
    format_sharding,
    open_sharding,
    parse_per_value,
    parse_sharding,
)
from shardc.compiler.sharding.walker import nested_ops
from shardc.dialects import sdy
from shardc.dialects.sdy import SHARDING_ATTR


def _is_static(value: ir.Value) -> bool:
    return isinstance(value.type, ir.ShapedType) and ir.ShapedType(value.type).has_static_shape


def _rank(value: ir.Value) -> int:
    return ir.ShapedType(value.type).rank if isinstance(value.type, ir.ShapedType) else 0


class _OwnerShardings:
    """Read and write the owner shardings of one data-flow op, as Shardy's interface does."""

    def __init__(self, op: ir.Operation, meshes: dict[str, MeshInfo]):
        self.op = op
        self.meshes = meshes
        self.manual = manual.manual_axes_of(op) if op.name == manual.MANUAL_OP else ()

    def _list(self, name: str) -> list[TensorSharding] | None:
        attrs = self.op.attributes
        return parse_per_value(str(attrs[name]), self.meshes) if name in attrs else None

    def results(self) -> list[TensorSharding] | None:
        name = "out_shardings" if self.op.name in BLOCK_ARG_OWNER_OPS else SHARDING_ATTR
        return self._list(name)

    def block_args(self) -> list[TensorSharding] | None:
        shardings = self._list("in_shardings")
        if shardings is not None and self.op.name == manual.MANUAL_OP:
            shardings = [manual.erase_manual_axes(s, self.manual) for s in shardings]
        return shardings

    def set_results(self, shardings: list[TensorSharding]) -> None:
        name = "out_shardings" if self.op.name in BLOCK_ARG_OWNER_OPS else SHARDING_ATTR
        self.op.attributes[name] = ir.Attribute.parse(format_per_value(shardings))

    def set_block_args(self, shardings: list[TensorSharding]) -> None:
        if self.op.name == manual.MANUAL_OP:
            outer = self._list("in_shardings") or []
            shardings = [manual.add_free_axes(o, s, self.manual) for o, s in zip(outer, shardings)]
        self.op.attributes["in_shardings"] = ir.Attribute.parse(format_per_value(shardings))


def _add_edges(owners: list[ir.Value], shardings: list[TensorSharding] | None) -> None:
    for index in reversed(range(len(owners))):
        owner = owners[index]
        # An owner whose edge is written already (by hand, or by an earlier run)
        # keeps it: an edge of an edge owns nothing.
        if not _is_static(owner) or _edge_user(owner) is not None:
            continue
        if isinstance(owner.owner, ir.Block):
            point = ir.InsertionPoint.at_block_begin(owner.owner)
        else:
            point = ir.InsertionPoint.after(owner.owner)
        attr = None
        if shardings is not None and shardings[index] is not None:
            attr = ir.Attribute.parse(format_sharding(shardings[index]))
        edge = sdy.DataFlowEdgeOp(owner, sharding=attr, ip=point, loc=owner.location)
        owner.replace_all_uses_except(edge.result, edge.operation)


def add_data_flow_edges(module: ir.Operation) -> None:
    """Insert an ``sdy.data_flow_edge`` after every data-flow edge owner."""
    meshes = read_meshes(module)
    with module.context:
        for op in nested_ops(module, ir.WalkOrder.POST_ORDER, DATA_FLOW_OPS):
            name = op.name
            owners = _OwnerShardings(op, meshes)
            _add_edges(list(op.results), owners.results())
            if name in BLOCK_ARG_OWNER_OPS and op.regions[0].blocks:
                _add_edges(list(op.regions[0].blocks[0].arguments), owners.block_args())


def _edge_user(owner: ir.Value) -> ir.Operation | None:
    uses = list(owner.uses)
    if len(uses) == 1 and uses[0].owner.name == EDGE_OP:
        return uses[0].owner
    return None


def _edge_shardings(owners: list[ir.Value],
                    meshes: dict[str, MeshInfo]) -> list[TensorSharding] | None:
    shardings: list[TensorSharding | None] = []
    mesh = None
    for owner in owners:
        edge = _edge_user(owner)
        sharding = None
        if edge is not None and "sharding" in edge.attributes:
            sharding = parse_sharding(str(edge.attributes["sharding"]), meshes)
            mesh = mesh or sharding.mesh
        shardings.append(sharding)
    if mesh is None:
        return None
    return [s if s is not None else open_sharding(mesh, _rank(o))
            for s, o in zip(shardings, owners)]


def sink_data_flow_edges(module: ir.Operation) -> None:
    """Copy edge shardings to their owners and replace every edge by its input."""
    meshes = read_meshes(module)
    with module.context:
        for op in nested_ops(module, ir.WalkOrder.PRE_ORDER, {EDGE_OP, *DATA_FLOW_OPS}):
            if op.name == EDGE_OP:
                edge_input = op.operands[0]
                op.result.replace_all_uses_with(edge_input)
                op.erase()
                continue
            owners = _OwnerShardings(op, meshes)
            if op.name in BLOCK_ARG_OWNER_OPS and op.regions[0].blocks:
                args = list(op.regions[0].blocks[0].arguments)
                shardings = _edge_shardings(args, meshes)
                if shardings is not None:
                    owners.set_block_args(shardings)
            shardings = _edge_shardings(list(op.results), meshes)
            if shardings is not None:
                owners.set_results(shardings)
