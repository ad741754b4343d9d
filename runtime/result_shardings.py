"""The shardings a compiled program's results come back with, decided as jax.jit
decides them (jax's ``pxla``: ``_maybe_get_and_check_out_shardings``,
``maybe_recover_user_shardings``, ``finalize_shardings``).

A result keeps the sharding asked for it (``out_shardings``, or the one its type
carries on Explicit axes). Where the sharding was left open (unconstrained
dimensions, or a type on a mesh mixing Explicit and Auto axes), XLA's choice is
the result's *type* (``jax.typeof(result).sharding``) when they tile alike, else
XLA's read over the type's mesh. A result left to XLA is, in this order: the first
placed argument's sharding object itself where XLA tiles it alike (same rank, same
mesh), XLA's tiling read over the result type's mesh (its axis names and types;
the argument's mesh when the type has none), or, with no placed argument, over the
program's mesh. So ``P('x', None)`` and ``P('x',)`` come back as jax.jit returns
them, and so do the axis types of the mesh.

Each value is described by its ``aval``, ``sharding`` (asked for, or None) and
``type_sharding`` (its type's ``NamedSharding`` on an abstract mesh, or None).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax
import numpy as np
from jax.sharding import (
    AbstractMesh,
    AxisType,
    Mesh,
    NamedSharding,
    PartitionSpec,
    SingleDeviceSharding,
)

from shardc.dialects import jax_private
from shardc.dialects.errors import ShardcError


def concrete_mesh(mesh: Mesh | AbstractMesh, devices: Sequence) -> Mesh:
    """``mesh`` itself if concrete, else the abstract mesh laid over ``devices`` in order."""
    if isinstance(mesh, Mesh):
        return mesh
    grid = np.array(list(devices), dtype=object).reshape(mesh.axis_sizes)
    return Mesh(grid, mesh.axis_names, axis_types=mesh.axis_types)


def is_open(sharding: NamedSharding | None) -> bool:
    """Whether XLA decides (part of) a value's sharding: none asked, or unconstrained
    dimensions."""
    if sharding is None:
        return True
    return any(entry is PartitionSpec.UNCONSTRAINED for entry in sharding.spec.partitions)


def requested_sharding(info: Any, op_sharding: Any, devices: tuple, ndim: int
                       ) -> NamedSharding:
    """The closed sharding asked for a value, on ``devices``; checked against what XLA
    compiled (``ndim``: the rank inside the module, a PRNG key's data's)."""
    requested = info.sharding
    if not isinstance(requested.mesh, Mesh):
        # Only rebuild abstract ones: keeping the caller's object keeps the
        # `arg.sharding is expected` fast path of every later call.
        requested = NamedSharding(concrete_mesh(requested.mesh, devices), requested.spec,
                                  memory_kind=requested.memory_kind)
    empty = 0 in info.aval.shape  # no data: XLA may report anything
    if op_sharding is not None and not empty and not jax_private.hlo_sharding_equivalent(
            requested, op_sharding, devices, ndim):
        raise ShardcError(
            f"{info.path}: XLA compiled a different sharding than the one requested "
            f"({op_sharding} instead of {requested.spec}); this is a shardc bug")
    return requested


def output_shardings(outputs: Sequence[Any], op_shardings: Sequence[Any],
                     physical_ranks: Sequence[int], devices: tuple,
                     inputs: Sequence[Any], mesh: Mesh | None) -> list:
    """The sharding each output comes back with (``op_shardings``: XLA's, None where it
    said nothing; ``physical_ranks``: each output's rank inside the module; ``inputs``:
    the arguments, whose first placed one the results follow; ``mesh``: the program's,
    concrete, or None on one device)."""
    decided = [
        _compiled(info, op, rank, devices)
        for info, op, rank in zip(outputs, op_shardings, physical_ranks)
    ]
    if any(jax_private.is_gspmd_sharding(s) for s in decided):
        decided = _recovered(decided, outputs, inputs, devices, mesh)
    if len(devices) == 1:
        # One device ran no partitioner: what is left is its SingleDeviceSharding, as is
        # a result asked for by one (lowered as a sharding of its device alone).
        return [SingleDeviceSharding(devices[0], memory_kind=s.memory_kind)
                if jax_private.is_gspmd_sharding(s)
                or isinstance(getattr(info, "placed_as", None), SingleDeviceSharding) else s
                for s, info in zip(decided, outputs)]
    return decided


def _compiled(info: Any, op_sharding: Any, rank: int, devices: tuple) -> Any:
    """One output after compiling: the closed sharding asked for, an open one settled
    (against its type), or XLA's ``GSPMDSharding`` for a result left to it."""
    if not is_open(info.sharding):
        return requested_sharding(info, op_sharding, devices, rank)
    compiled = jax_private.compiled_sharding(op_sharding, devices, info.aval,
                                             memory_kind(info))
    typed = _type(info)
    if info.sharding is None and not _mixes_explicit_and_auto(typed):
        return compiled
    # Open: jax asked for the type's spec with its unsharded dimensions unconstrained.
    if typed is not None and typed.mesh.axis_names and not _any_manual(typed.mesh) \
            and not _extended(info.aval):
        settled = NamedSharding(concrete_mesh(typed.mesh, devices), typed.spec,
                                memory_kind=compiled.memory_kind)
        ndim = len(info.aval.shape)
        if jax_private.same_hlo_sharding(jax_private.hlo_sharding(settled, ndim),
                                         jax_private.hlo_sharding(compiled, ndim)):
            return settled
    asked = info.sharding if info.sharding is not None else typed
    return _named(compiled, typed, concrete_mesh(asked.mesh, devices), devices)


def _recovered(decided: list, outputs: Sequence[Any], inputs: Sequence[Any],
               devices: tuple, mesh: Mesh | None) -> list:
    """XLA's shardings of the results left to it, in the user's terms: as the first
    argument placed with a ``NamedSharding``, else over the program's mesh, unless
    that is only the mesh shardc reads an argument's ``GSPMDSharding`` over (jax.jit
    then keeps XLA's ``GSPMDSharding``)."""
    first = next((info for info in inputs if info.sharding is not None
                  and getattr(info, "placed_as", None) is None), None)
    if any(getattr(info, "placed_as", None) is not None and info.sharding.mesh == mesh
           for info in inputs):
        mesh = None
    out = []
    for sharding, info in zip(decided, outputs):
        if not jax_private.is_gspmd_sharding(sharding):
            out.append(sharding)
        elif first is not None:
            out.append(_like_argument(sharding, info, first, devices))
        elif mesh is not None and mesh.axis_names:
            out.append(_read_over(sharding, mesh, len(info.aval.shape)))
        else:
            out.append(sharding)
    return out


def _like_argument(compiled: Any, info: Any, argument: Any, devices: tuple) -> Any:
    """A result left to XLA, when an argument was placed: that argument's own sharding
    where XLA tiles the result alike (same rank, the same mesh in the result's type),
    else XLA's tiling over the result type's mesh (the argument's if it has none)."""
    own = argument.sharding
    if not isinstance(own.mesh, Mesh):  # given on an abstract mesh: now on the devices
        own = NamedSharding(concrete_mesh(own.mesh, devices), own.spec,
                            memory_kind=own.memory_kind)
    ndim = len(info.aval.shape)
    typed = _type(info)
    type_mesh = typed.mesh if typed is not None else AbstractMesh((), ())
    if ndim == len(argument.aval.shape) and type_mesh == own.mesh.abstract_mesh \
            and _tiled_alike(compiled, own, ndim, devices):
        return own
    return _named(compiled, typed, own.mesh, devices)


def _tiled_alike(compiled: Any, own: NamedSharding, ndim: int, devices: tuple) -> bool:
    """Whether XLA places a result as an argument's sharding does: tiled alike, on the
    same devices in the same order, in the same memory."""
    return tuple(own.mesh.devices.flat) == tuple(devices) \
        and compiled.memory_kind == own.memory_kind and jax_private.same_hlo_sharding(
            jax_private.hlo_sharding(compiled, ndim), jax_private.hlo_sharding(own, ndim))


def _named(compiled: Any, typed: NamedSharding | None, fallback: Mesh, devices: tuple
           ) -> Any:
    """XLA's tiling as a ``NamedSharding`` over the result type's mesh (laid over the
    program's devices) or, where the type has no mesh of its own, ``fallback``;
    XLA's ``GSPMDSharding`` itself where no spec over that mesh says the same."""
    if typed is not None and typed.mesh.axis_names and not _any_manual(typed.mesh):
        mesh = concrete_mesh(typed.mesh, devices)
    else:
        mesh = fallback
    try:
        return jax_private.named_via_mesh(compiled, mesh)
    except jax_private.indivisible_error_class():
        raise
    except Exception:  # jax keeps XLA's form where its parser gives up
        return compiled


def _read_over(compiled: Any, mesh: Mesh, ndim: int) -> Any:
    """XLA's tiling read over the program's mesh, or XLA's form where no spec says it."""
    try:
        named = jax_private.named_via_mesh(compiled, mesh)
    except Exception:  # tile shapes no spec over this mesh has
        return compiled
    return named if named.is_equivalent_to(compiled, ndim) else compiled


def memory_kind(info: Any) -> str | None:
    """The memory a value comes back in: the one asked for it, else the one its traced
    type says (``memory_space``: None for the device's), as XLA compiled it."""
    asked = info.sharding.memory_kind if info.sharding is not None else None
    space = getattr(info, "memory_space", None)
    if asked is not None or space is None:
        return asked
    return jax_private.memory_kind_of_space(space)


def _type(info: Any) -> NamedSharding | None:
    """The value's type: the sharding asked for it (as jax normalises it into the
    type), else the one it was traced with."""
    asked = info.sharding
    if asked is not None:
        return NamedSharding(asked.mesh.abstract_mesh,
                             jax_private.spec_of_type(asked.spec, len(info.aval.shape)))
    return getattr(info, "type_sharding", None)


def _mixes_explicit_and_auto(typed: NamedSharding | None) -> bool:
    """A type on a mesh with Explicit and Auto axes: jax.jit asks for its spec with the
    Auto axes left to XLA (every other type on Explicit axes is asked for closed)."""
    if typed is None:
        return False
    kinds = set(typed.mesh.axis_types)
    return AxisType.Explicit in kinds and AxisType.Auto in kinds


def _any_manual(mesh: Any) -> bool:
    return AxisType.Manual in mesh.axis_types


def _extended(aval: Any) -> bool:
    return jax.dtypes.issubdtype(aval.dtype, jax.dtypes.extended)
