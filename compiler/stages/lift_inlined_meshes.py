"""Lift meshes written inline in shardings into de-duplicated ``sdy.mesh`` symbols."""

from __future__ import annotations

from jaxlib.mlir import ir

from shardc.compiler.diagnostics import emit_remark
from shardc.compiler.sharding.walker import (
    FUNC_OP,
    FUNC_SHARDING_LISTS,
    map_sharding_attr,
    map_shardings,
    mesh_name_of,
    sharding_attr_names,
)
from shardc.dialects import sdy
from shardc.dialects.sdy import SHARDING_ATTR

MESH_OP = "sdy.mesh"
STABLEHLO_MESH_ATTR = "stablehlo.mesh"
EMPTY_MESH_NAME = "empty_mesh"


class SymbolNamer:
    """Unique top-level symbol names, renamed like mlir::SymbolTable::insert does."""

    def __init__(self, taken: set[str] | None = None) -> None:
        self.taken = set(taken or ())
        # One counter for the whole table, as in SymbolTable: `mesh_0`, `mesh_1`, ...
        self.counter = 0

    @classmethod
    def of_module(cls, module: ir.Operation) -> SymbolNamer:
        """A namer for new symbols of ``module``, whose symbols are taken."""
        return cls({
            ir.StringAttr(op.attributes["sym_name"]).value
            for op in module.regions[0].blocks[0].operations
            if "sym_name" in op.attributes
        })

    def unique(self, name: str) -> str:
        candidate = name
        while candidate in self.taken:
            candidate = f"{name}_{self.counter}"
            self.counter += 1
        self.taken.add(candidate)
        return candidate


def new_mesh_name(mesh: sdy.MeshAttr) -> str:
    """Shardy's base name for a lifted mesh: maximal, empty or plain."""
    device_ids = list(mesh.device_ids)
    if not list(mesh.axes):
        if len(device_ids) == 1:
            return f"maximal_mesh_{device_ids[0]}"
        if not device_ids:
            return EMPTY_MESH_NAME
    return "mesh"


def stablehlo_mesh_attr(mesh: sdy.MeshAttr) -> ir.Attribute:
    """The ``stablehlo.mesh`` dictionary jaxlib's import attaches to each mesh symbol."""
    axes = [sdy.MeshAxisAttr(axis) for axis in mesh.axes]
    axis_text = ", ".join(
        f"{{name = {ir.StringAttr.get(a.name)}, size = {a.size} : i64}}" for a in axes
    )
    text = f"axes = [{axis_text}]"
    device_ids = list(mesh.device_ids)
    if device_ids:
        text += f", device_ids = dense<{device_ids}> : tensor<{len(device_ids)}xi64>"
    return ir.Attribute.parse("{" + text + "}")


class InlineMeshes:
    """Whether some sharding of the ops shown to ``look`` names its mesh inline (the
    shardings ``lift_inlined_meshes`` rewrites, besides those naming a duplicate
    mesh symbol). Each distinct attribute is looked into once.

    A walk the pipeline makes anyway shows it every op, so that a module without
    inline meshes (jax's modules) is not walked again for nothing.
    """

    def __init__(self) -> None:
        self.found = False
        self._seen: set[ir.Attribute] = set()

    def look(self, op: ir.Operation, name: str) -> None:
        """Look into the shardings of ``op``, named ``name`` (what ``map_shardings``
        would show ``lift_inlined_meshes``)."""
        attributes = op.attributes
        if name == FUNC_OP:
            for list_name in FUNC_SHARDING_LISTS:
                if list_name in attributes:
                    for entry in ir.ArrayAttr(attributes[list_name]):
                        self._look_into_entry(entry)
        if name.startswith("sdy."):
            for attr_name in sharding_attr_names(op):
                self._look_into(attributes[attr_name])
        elif SHARDING_ATTR in attributes:
            self._look_into(attributes[SHARDING_ATTR])

    def _look_into_entry(self, entry: ir.Attribute) -> None:
        if entry in self._seen:
            return
        self._seen.add(entry)
        entries = ir.DictAttr(entry)
        if SHARDING_ATTR in entries:
            self._look_into(entries[SHARDING_ATTR])

    def _look_into(self, attr: ir.Attribute) -> None:
        if attr in self._seen:
            return
        self._seen.add(attr)
        map_sharding_attr(attr, self._note)

    def _note(self, sharding: sdy.TensorShardingAttr) -> ir.Attribute:
        if mesh_name_of(sharding) is None:
            self.found = True
        return sharding


def lift_inlined_meshes(
    module: ir.Operation, *, add_stablehlo_mesh: bool = True, report_duplicates: bool = False,
    inline_meshes: bool = True,
) -> None:
    """Replace inline meshes by mesh symbols and merge duplicate mesh symbols.

    ``inline_meshes=False`` says that no sharding names its mesh inline (an
    ``InlineMeshes`` was shown every op): the shardings are then walked only to
    re-point those naming a duplicate mesh symbol, if there is one.
    """
    body = module.regions[0].blocks[0]
    names = SymbolNamer.of_module(module)
    name_for_mesh: dict[ir.Attribute, str] = {}
    name_for_ref: dict[str, str] = {}
    last_mesh_op: ir.Operation | None = None
    for op in list(body.operations):
        if op.operation.name != MESH_OP:
            continue
        mesh_op = op.operation
        mesh = mesh_op.attributes["mesh"]
        name = ir.StringAttr(mesh_op.attributes["sym_name"]).value
        if mesh in name_for_mesh:
            name_for_ref[name] = name_for_mesh[mesh]
            if report_duplicates:
                emit_remark(mesh_op, f"mesh @{name} duplicates @{name_for_mesh[mesh]}; merged")
            names.taken.discard(name)
            mesh_op.erase()
        else:
            name_for_mesh[mesh] = name
            last_mesh_op = mesh_op

    def create_mesh_op(mesh: sdy.MeshAttr) -> str:
        nonlocal last_mesh_op
        name = names.unique(new_mesh_name(mesh))
        with ir.InsertionPoint.at_block_begin(body), module.location:
            new_op = sdy.MeshOp(name, mesh).operation
        if last_mesh_op is not None:
            new_op.move_after(last_mesh_op)
        last_mesh_op = new_op
        return name

    def relink(sharding: sdy.TensorShardingAttr) -> ir.Attribute:
        ref = mesh_name_of(sharding)
        if ref is not None:
            target = name_for_ref.get(ref)
        else:
            mesh = sharding.mesh_or_ref
            target = name_for_mesh.get(mesh)
            if target is None:
                target = name_for_mesh[mesh] = create_mesh_op(sdy.MeshAttr(mesh))
        if target is None:
            return sharding
        return sdy.TensorShardingAttr.get(
            target,
            sharding.dimension_shardings,
            sharding.replicated_axes,
            sharding.unreduced_axes,
        )

    if inline_meshes or name_for_ref:
        map_shardings(module, relink)
    if add_stablehlo_mesh:
        for op in body.operations:
            if op.operation.name == MESH_OP:
                mesh = sdy.MeshAttr(op.operation.attributes["mesh"])
                op.operation.attributes[STABLEHLO_MESH_ATTR] = stablehlo_mesh_attr(mesh)
