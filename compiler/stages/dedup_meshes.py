"""Merge mesh symbols over the same devices into one, as XLA does before its Shardy runs.

``jax.jit`` hands its module to XLA through the Shardy round trip, whose export
runs ``xla-sdy-round-trip-dedup-meshes`` before propagation: mesh symbols with
the same number of devices and the same device ids are one mesh, the *main*
one, and every other names its axes as (sub-)axes of it (``"devices"=8``
becomes ``{"data", "model"}`` of ``["data"=4, "model"=2]``). Propagation then
sees a single mesh where the program named two, and shards an op whose
operands came from both; without this step Shardy finds no common mesh and
leaves the op to the partitioner.

The main mesh of a group is one with real axes (not a ``_``-prefixed fake
axis), then the most axes of size > 1, then the first. A mesh whose axis sizes
do not line up with the main mesh's (``[2, 3]`` against ``[3, 2]``) is kept.
Shardings that name their mesh inline are left as they are.
"""

from __future__ import annotations

from math import prod

from jaxlib.mlir import ir

from shardc.compiler.propagation.ir_access import read_meshes
from shardc.compiler.propagation.manual import MANUAL_OP, manual_axes_of
from shardc.compiler.sharding.axes import AxisRef, add_axis_or_merge, full_axis
from shardc.compiler.sharding.tensor import (
    DimSharding,
    TensorSharding,
    format_sharding,
    parse_per_value,
    parse_sharding,
)
from shardc.compiler.sharding.walker import map_shardings, mesh_name_of, nested_ops
from shardc.compiler.stages.lift_inlined_meshes import MESH_OP
from shardc.dialects import sdy

Axes = list[tuple[str, int]]
# A duplicate mesh's axis name -> the main mesh's (sub-)axes it is made of.
AxisMap = dict[str, list[AxisRef]]


def dedup_meshes(module: ir.Operation) -> None:
    """Re-point every sharding on a duplicate mesh to its main mesh; erase the duplicates."""
    body = module.regions[0].blocks[0]
    mesh_ops = [op.operation for op in body.operations if op.operation.name == MESH_OP]
    if len(mesh_ops) < 2:
        return
    duplicates = _duplicates(mesh_ops)
    if not duplicates:
        return
    meshes = read_meshes(module)

    def replace(sharding: sdy.TensorShardingAttr) -> ir.Attribute:
        name = mesh_name_of(sharding)
        if name not in duplicates:
            return sharding
        parsed = parse_sharding(str(sharding), meshes)
        return ir.Attribute.parse(format_sharding(_on_main(parsed, *duplicates[name])),
                                  sharding.context)

    with module.context:
        _replace_manual_axes(module, meshes, duplicates)
        map_shardings(module, replace)
    for op in mesh_ops:
        if ir.StringAttr(op.attributes["sym_name"]).value in duplicates:
            op.erase()


def _duplicates(mesh_ops: list[ir.Operation]) -> dict[str, tuple[str, Axes, AxisMap]]:
    """Each duplicate mesh's name -> its main mesh's name and axes, and its axis map."""
    found: list[tuple[str, Axes, tuple]] = []
    main: dict[tuple, tuple[str, Axes]] = {}
    for op in mesh_ops:
        mesh = sdy.MeshAttr(op.attributes["mesh"])
        axes = [(a.name, a.size) for a in map(sdy.MeshAxisAttr, mesh.axes)]
        # -1 keeps the empty mesh apart from meshes whose axes all have size 1.
        key = (prod(s for _, s in axes) if axes else -1, tuple(mesh.device_ids))
        name = ir.StringAttr(op.attributes["sym_name"]).value
        found.append((name, axes, key))
        if key not in main or _preferred(axes, main[key][1]):
            main[key] = (name, axes)
    duplicates = {}
    for name, axes, key in found:
        main_name, main_axes = main[key]
        if name != main_name:
            axis_map = _map_axes(axes, main_axes)
            if axis_map is not None:
                duplicates[name] = (main_name, main_axes, axis_map)
    return duplicates


def _preferred(axes: Axes, main_axes: Axes) -> bool:
    """Whether a later mesh with ``axes`` replaces ``main_axes`` as the main mesh."""
    fake, main_fake = _has_fake_axis(axes), _has_fake_axis(main_axes)
    if fake != main_fake:
        return main_fake
    return _real_axes(axes) > _real_axes(main_axes)


def _has_fake_axis(axes: Axes) -> bool:
    return bool(axes) and axes[0][0].startswith("_")


def _real_axes(axes: Axes) -> int:
    return sum(size > 1 for _, size in axes)


def _map_axes(axes: Axes, main_axes: Axes) -> AxisMap | None:
    """Each axis of ``axes`` as consecutive (sub-)axes of ``main_axes``; None when an
    axis would split a main axis at a size that does not divide it."""
    targets = [(n, s) for n, s in axes if s > 1]
    mains = [(n, s) for n, s in main_axes if s > 1]
    axis_map: AxisMap = {}
    t = m = 0
    t_left = targets[0][1] if targets else 1
    m_left, m_pre = (mains[0][1] if mains else 1), 1
    while t < len(targets) and m < len(mains):
        take, larger = sorted((t_left, m_left))
        if larger % take:
            return None
        main_name, main_size = mains[m]
        ref = full_axis(main_name, main_size) if take == main_size else AxisRef(
            main_name, m_pre, take, main_size)
        axis_map.setdefault(targets[t][0], []).append(ref)
        t_left //= take
        m_left //= take
        m_pre *= take
        if t_left == 1:
            t += 1
            t_left = targets[t][1] if t < len(targets) else 1
        if m_left == 1:
            m += 1
            m_left, m_pre = (mains[m][1] if m < len(mains) else 1), 1
    return axis_map


def _on_main(sharding: TensorSharding, main_name: str, main_axes: Axes,
             axis_map: AxisMap) -> TensorSharding:
    def refs(axes) -> tuple[AxisRef, ...]:
        out: list[AxisRef] = []
        for axis in axes:
            for ref in _mapped(axis, axis_map):
                add_axis_or_merge(out, ref)
        return tuple(out)

    dims = tuple(DimSharding(refs(d.axes), d.closed, d.priority) for d in sharding.dims)
    return TensorSharding(main_name, dims, refs(sharding.replicated), refs(sharding.unreduced))


def _mapped(axis: AxisRef, axis_map: AxisMap) -> list[AxisRef]:
    """The main mesh's (sub-)axes that ``axis`` of a duplicate mesh is (none for an
    axis of size 1)."""
    parts = axis_map.get(axis.name, [])
    if axis.size == axis.total:
        return parts
    out = []
    pre, left = axis.pre, axis.size
    for part in parts:
        if pre >= part.size:
            pre //= part.size
            continue
        taken = min(left, part.size // pre)
        out.append(part if taken == part.size else AxisRef(
            part.name, pre * part.pre, taken, part.total))
        pre, left = 1, left // taken
        if left == 1:
            break
    return out


def _replace_manual_axes(module: ir.Operation, meshes: dict,
                         duplicates: dict[str, tuple[str, Axes, AxisMap]]) -> None:
    """Name the manual axes of a manual computation on a duplicate mesh (the mesh of
    its shardings, still unchanged) as the main mesh's axes they are."""
    for op in nested_ops(module, ir.WalkOrder.PRE_ORDER, {MANUAL_OP}):
        shardings = [s for attr in ("in_shardings", "out_shardings")
                     for s in parse_per_value(str(op.attributes[attr]), meshes)]
        if not shardings or shardings[0].mesh not in duplicates:
            continue
        axis_map = duplicates[shardings[0].mesh][2]
        refs: list[AxisRef] = []
        for axis in manual_axes_of(op):
            for ref in axis_map.get(axis, []):
                add_axis_or_merge(refs, ref)
        if any(ref.size != ref.total for ref in refs):
            raise NotImplementedError(
                "a manual axis that is a sub-axis of the mesh it is deduplicated into")
        text = "#sdy<manual_axes{" + ", ".join(f'"{r.name}"' for r in refs) + "}>"
        op.attributes["manual_axes"] = ir.Attribute.parse(text, op.context)
