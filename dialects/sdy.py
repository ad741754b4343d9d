"""The bridge between jax's sharding vocabulary and Shardy (``sdy``) IR.

jax speaks in ``Mesh`` / ``AbstractMesh``, ``NamedSharding`` and
``PartitionSpec``; Shardy speaks in ``#sdy.mesh``, ``sdy.mesh`` symbols and
``#sdy.sharding``. This module converts both ways, written by shardc (it does
not call jax's private sharding-to-sdy helpers), and validates on the way in:
unknown axes, axes used twice, specs longer than the value's rank and
dimensions their axes do not divide are errors that name the culprit.

Conversion rules (they match what ``jax.jit`` prints, which the tests check):

* dimensions past the end of the spec, and ``None`` entries, are closed and
  unsharded (``{}``); a scalar's sharding is ``[]``;
* ``'x'`` is ``{"x"}``; a tuple ``('x', 'y')`` is ``{"x", "y"}``, major to minor,
  in the order written;
* ``PartitionSpec.UNCONSTRAINED`` is an open dimension ``{?}`` that
  propagation may fill;
* unreduced axes are listed in mesh order;
* with ``modify_wrt_axis_types=True`` (how jax writes sharding constraints on
  a mesh with Auto axes) every dimension is open and the Explicit axes the
  spec leaves unused are listed as ``replicated``.

The way back (``#sdy.sharding`` + mesh -> ``NamedSharding``) gives the
canonical spec, without trailing ``None`` entries; anything a
``PartitionSpec`` cannot say (sub-axes, priorities, open dimensions that
already hold axes) is an error rather than a silent approximation.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Union

from jaxlib.mlir import ir
from jaxlib.mlir.dialects.sdy import *  # noqa: F403  (re-export jaxlib's sdy ops and attrs)
from jaxlib.mlir.dialects.sdy import (
    AxisRefAttr,
    DimensionShardingAttr,
    MeshAttr,
    MeshAxisAttr,
    ShardingConstraintOp,
    TensorShardingAttr,
    TensorShardingPerValueAttr,
)

from shardc.dialects.errors import (
    DuplicateAxisError,
    IndivisibleDimensionError,
    NoPartitionSpecFormError,
    RankMismatchError,
    ShardingError,
    UnknownAxisError,
)

if TYPE_CHECKING:
    from jax.sharding import AbstractMesh, Mesh, NamedSharding, PartitionSpec

    AnyMesh = Union[Mesh, AbstractMesh]

# Attribute names shardc reads and writes: every spelling of them is here.
SHARDING_ATTR = "sdy.sharding"
SHARDING_RULE_ATTR = "sdy.sharding_rule"
ORIGINS_ATTR = "sdy.sharding_origins"
ORIGIN_NAME_ATTR = "sdy.sharding_origin_name"

EMPTY_MESH_SYMBOL = "empty_mesh"


# ----------------------------------------------------------------------------
# Meshes
# ----------------------------------------------------------------------------


def mesh_axes(mesh: AnyMesh) -> tuple[tuple[str, int], ...]:
    """Return the mesh's ``(name, size)`` pairs in mesh order."""
    return tuple(zip(mesh.axis_names, mesh.axis_sizes))


def logical_device_ids(mesh: AnyMesh) -> tuple[int, ...] | None:
    """Return the mesh's device order as positions in its sorted device set.

    ``None`` for an abstract mesh, and for a concrete one whose devices are in
    increasing id order (the iota order ``sdy.mesh`` assumes when it carries no
    ``device_ids``). Logical ids are relative to the sorted device set, so a
    mesh on devices 4..7 in order is iota too.
    """
    from jax.sharding import Mesh

    if not isinstance(mesh, Mesh):
        return None
    ids = [device.id for device in mesh.devices.flat]
    rank_of = {device_id: rank for rank, device_id in enumerate(sorted(ids))}
    logical = tuple(rank_of[device_id] for device_id in ids)
    return None if logical == tuple(range(len(logical))) else logical


def mesh_attr(mesh: AnyMesh, *, with_device_ids: bool = True) -> MeshAttr:
    """Convert a jax mesh to ``#sdy.mesh<["x"=4, "y"=2]>``.

    A concrete mesh whose devices are not in iota order also gets
    ``device_ids=[...]`` unless ``with_device_ids`` is false (``jit`` passes
    false: it carries the device order in the compile-time device assignment,
    as jax does, so that collectives written by ``shard_map`` keep their
    meaning). A mesh without axes gives the empty mesh ``<[]>``.
    """
    axes = [MeshAxisAttr.get(name, size) for name, size in mesh_axes(mesh)]
    device_ids = logical_device_ids(mesh) if with_device_ids else None
    return MeshAttr.get(axes, list(device_ids or ()))


def maximal_mesh_attr(device_id: int) -> MeshAttr:
    """Return the maximal mesh ``<[], device_ids=[k]>``: the value lives on one device."""
    return MeshAttr.get([], [device_id])


def mesh_from_attr(attr: ir.Attribute, devices: Sequence | None = None) -> AnyMesh:
    """Convert ``#sdy.mesh`` back to a jax mesh.

    Without ``devices`` the result is an ``AbstractMesh``. With them, a
    ``Mesh`` whose device order follows the attribute's ``device_ids`` over
    ``devices`` sorted by id (the inverse of ``mesh_attr``).
    """
    import numpy as np
    from jax.sharding import AbstractMesh, AxisType, Mesh

    attr = MeshAttr(attr)
    axes = [MeshAxisAttr(axis) for axis in attr.axes]
    names = tuple(axis.name for axis in axes)
    sizes = tuple(axis.size for axis in axes)
    auto = (AxisType.Auto,) * len(names)
    if devices is None:
        return AbstractMesh(sizes, names, axis_types=auto)
    ordered = sorted(devices, key=lambda device: device.id)
    if len(ordered) != math.prod(sizes):
        raise ShardingError(
            f"mesh {attr} has {math.prod(sizes)} devices but {len(ordered)} were given"
        )
    ids = list(attr.device_ids) or list(range(len(ordered)))
    grid = np.array([ordered[i] for i in ids], dtype=object).reshape(sizes)
    return Mesh(grid, names, axis_types=auto)


def same_mesh_shape(a: ir.Attribute, b: ir.Attribute) -> bool:
    """Whether two ``#sdy.mesh`` attributes have the same axis names and sizes."""
    return _axes_of(MeshAttr(a)) == _axes_of(MeshAttr(b))


def _axes_of(attr: MeshAttr) -> tuple[tuple[str, int], ...]:
    return tuple((MeshAxisAttr(a).name, MeshAxisAttr(a).size) for a in attr.axes)


# ----------------------------------------------------------------------------
# PartitionSpec / NamedSharding -> #sdy.sharding
# ----------------------------------------------------------------------------


def spec_dims(spec: PartitionSpec) -> tuple:
    """Return the spec's per-dimension entries (``spec.partitions`` where present)."""
    partitions = getattr(spec, "partitions", None)
    return tuple(partitions) if partitions is not None else tuple(spec)


def dim_axis_names(entry) -> tuple[str, ...]:
    """Return the axis names one spec entry shards a dimension over (major first)."""
    from jax.sharding import PartitionSpec

    if entry is None or entry is PartitionSpec.UNCONSTRAINED:
        return ()
    if isinstance(entry, str):
        return (entry,)
    if isinstance(entry, (tuple, list)) and all(isinstance(name, str) for name in entry):
        return tuple(entry)
    raise ShardingError(
        f"PartitionSpec entry {entry!r} is not an axis name, a tuple of axis names, "
        "None or PartitionSpec.UNCONSTRAINED"
    )


def validate_spec(spec: PartitionSpec, mesh: AnyMesh, ndim: int) -> None:
    """Check a spec against a mesh and a rank; raise a shardc error naming the problem."""
    dims = spec_dims(spec)
    if len(dims) > ndim:
        raise RankMismatchError(
            f"PartitionSpec {spec} has {len(dims)} entries but the value has rank {ndim}"
        )
    known = dict(mesh_axes(mesh))
    seen: set[str] = set()
    used = [name for entry in dims for name in dim_axis_names(entry)]
    for name in [*used, *sorted(getattr(spec, "unreduced", ()) or ())]:
        if name not in known:
            raise UnknownAxisError(
                f"PartitionSpec {spec} uses axis {name!r}, which the mesh does not have "
                f"(mesh axes: {', '.join(repr(n) for n in known) or 'none'})"
            )
        if name in seen:
            raise DuplicateAxisError(
                f"PartitionSpec {spec} uses mesh axis {name!r} more than once"
            )
        seen.add(name)


def validate_divisible(spec: PartitionSpec, mesh: AnyMesh, shape: Sequence[int]) -> None:
    """Check that every dimension's size is a multiple of the product of its axes."""
    sizes = dict(mesh_axes(mesh))
    for dim, entry in enumerate(spec_dims(spec)):
        names = dim_axis_names(entry)
        divisor = math.prod(sizes[name] for name in names)
        if shape[dim] % divisor:
            axes = " * ".join(f"{name}={sizes[name]}" for name in names)
            raise IndivisibleDimensionError(
                f"dimension {dim} of shape {tuple(shape)} has size {shape[dim]}, which "
                f"is not divisible by {divisor} (the product of its axes {axes}) in "
                f"PartitionSpec {spec}"
            )


def sharding_attr(
    spec: PartitionSpec,
    mesh: AnyMesh,
    ndim: int,
    *,
    mesh_symbol: str | None = None,
    modify_wrt_axis_types: bool = False,
) -> TensorShardingAttr:
    """Convert a spec on a mesh to ``#sdy.sharding`` for a value of rank ``ndim``.

    The mesh is referenced as ``@mesh_symbol`` when given, else written
    inline. Raises ``RankMismatchError``, ``UnknownAxisError`` or
    ``DuplicateAxisError`` for a spec that does not fit.
    """
    from jax.sharding import AxisType, PartitionSpec

    validate_spec(spec, mesh, ndim)
    dims = spec_dims(spec) + (None,) * (ndim - len(spec_dims(spec)))
    axis_types = dict(zip(mesh.axis_names, mesh.axis_types))
    open_all = modify_wrt_axis_types and AxisType.Auto in axis_types.values()
    dim_attrs = [
        DimensionShardingAttr.get(
            [AxisRefAttr.get(name) for name in dim_axis_names(entry)],
            is_closed=not (open_all or entry is PartitionSpec.UNCONSTRAINED),
        )
        for entry in dims
    ]
    used = {name for entry in dims for name in dim_axis_names(entry)}
    unreduced = set(getattr(spec, "unreduced", ()) or ())
    replicated: list[str] = []
    if open_all:
        replicated = [
            name
            for name, kind in axis_types.items()
            if kind == AxisType.Explicit and name not in used | unreduced
        ]
    in_mesh_order = [name for name in mesh.axis_names]
    return TensorShardingAttr.get(
        mesh_symbol if mesh_symbol is not None else mesh_attr(mesh),
        dim_attrs,
        replicated_axes=[AxisRefAttr.get(n) for n in in_mesh_order if n in replicated],
        unreduced_axes=[AxisRefAttr.get(n) for n in in_mesh_order if n in unreduced],
    )


def is_unspecified(spec: PartitionSpec, ndim: int) -> bool:
    """Whether a spec says nothing: every one of ``ndim`` dims UNCONSTRAINED.

    jax writes no ``sdy.sharding`` at all for such a value (and neither does
    shardc), which leaves it entirely to propagation. A scalar is never
    unspecified this way.
    """
    from jax.sharding import PartitionSpec

    dims = spec_dims(spec)
    return ndim > 0 and len(dims) == ndim and all(d is PartitionSpec.UNCONSTRAINED for d in dims)


# ----------------------------------------------------------------------------
# #sdy.sharding -> PartitionSpec / NamedSharding
# ----------------------------------------------------------------------------


def partition_spec_from_attr(attr: ir.Attribute) -> PartitionSpec:
    """Convert ``#sdy.sharding`` back to its canonical ``PartitionSpec``.

    Raises ``NoPartitionSpecFormError`` for sub-axes, priorities, open
    dimensions that hold axes, and replicated axes next to open dimensions.
    """
    from jax.sharding import PartitionSpec

    attr = TensorShardingAttr(attr)
    entries: list = []
    any_open = False
    for dim_attr in attr.dimension_shardings:
        dim = DimensionShardingAttr(dim_attr)
        names = [_full_axis_name(axis, attr) for axis in dim.axes]
        if dim.priority is not None:
            raise NoPartitionSpecFormError(
                f"{attr}: dimension {dim} has a priority, which PartitionSpec cannot express"
            )
        if not dim.is_closed:
            if names:
                raise NoPartitionSpecFormError(
                    f"{attr}: open dimension {dim} already holds axes; PartitionSpec "
                    "has no form for 'these axes, then more'"
                )
            any_open = True
            entries.append(PartitionSpec.UNCONSTRAINED)
        else:
            entries.append(None if not names else names[0] if len(names) == 1 else tuple(names))
    if any_open and attr.replicated_axes:
        raise NoPartitionSpecFormError(
            f"{attr}: replicated axes next to open dimensions have no PartitionSpec form"
        )
    while entries and entries[-1] is None:
        entries.pop()
    unreduced = frozenset(_full_axis_name(axis, attr) for axis in attr.unreduced_axes)
    return PartitionSpec(*entries, unreduced=unreduced) if unreduced else PartitionSpec(*entries)


def named_sharding_from_attr(attr: ir.Attribute, mesh: AnyMesh) -> NamedSharding:
    """Convert ``#sdy.sharding`` to a ``NamedSharding`` on ``mesh``.

    An inline mesh in the attribute must have the same axes as ``mesh``; a
    symbol reference is trusted to name it (the caller resolves symbols).
    """
    from jax.sharding import NamedSharding

    tensor = TensorShardingAttr(attr)
    inline = tensor.mesh_or_ref
    if MeshAttr.isinstance(inline) and _axes_of(MeshAttr(inline)) != mesh_axes(mesh):
        raise ShardingError(f"{attr} is on mesh {inline}, not on {mesh}")
    spec = partition_spec_from_attr(tensor)
    validate_spec(spec, mesh, len(tensor.dimension_shardings))
    return NamedSharding(mesh, spec)


def _full_axis_name(axis: ir.Attribute, context: ir.Attribute) -> str:
    ref = AxisRefAttr(axis)
    if ref.sub_axis_info is not None:
        raise NoPartitionSpecFormError(
            f"{context}: sub-axis {ref} has no PartitionSpec form (only whole mesh axes do)"
        )
    return ref.name


# ----------------------------------------------------------------------------
# Shardings in IR
# ----------------------------------------------------------------------------


def value_sharding(value: ir.Value) -> ir.Attribute | None:
    """The ``#sdy.sharding`` a value carries, as Shardy reads it: a function argument's,
    a constraint's (reshard's, data-flow edge's) own, a manual computation's result
    sharding, or any other op's per-value entry; None when it has none (or is
    another block's argument)."""
    owner = value.owner
    if isinstance(owner, ir.Block):
        parent = owner.owner.operation
        if parent.name != "func.func" or "arg_attrs" not in parent.attributes:
            return None
        index = ir.BlockArgument(value).arg_number
        entry = ir.DictAttr(ir.ArrayAttr(parent.attributes["arg_attrs"])[index])
        return entry[SHARDING_ATTR] if SHARDING_ATTR in entry else None
    op = owner.operation if hasattr(owner, "operation") else owner
    if op.name in _OWN_SHARDING_OPS:
        return op.attributes["sharding"] if "sharding" in op.attributes else None
    name = "out_shardings" if op.name == "sdy.manual_computation" else SHARDING_ATTR
    if name not in op.attributes:
        return None
    per_value = TensorShardingPerValueAttr(op.attributes[name]).shardings
    return per_value[ir.OpResult(value).result_number]


# Ops whose one result's sharding is their ``sharding`` attribute.
_OWN_SHARDING_OPS = ("sdy.sharding_constraint", "sdy.reshard", "sdy.data_flow_edge")


def constrain_results(op: ir.Operation, shardings: Sequence[ir.Attribute]) -> None:
    """Follow each result of ``op`` by a closed ``sdy.sharding_constraint`` to its entry
    of ``shardings``, which every former user reads instead."""
    after = ir.InsertionPoint.after(op)
    for result, sharding in zip(op.results, shardings, strict=True):
        constraint = ShardingConstraintOp(result, sharding, loc=op.location, ip=after)
        result.replace_all_uses_except(constraint.result, constraint.operation)
