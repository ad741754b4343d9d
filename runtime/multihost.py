"""Moving data between a process's host-local view and global arrays.

In a multi-process run (``jax.distributed.initialize``) every process holds
the rows of a global array that belong to its own devices. These helpers
convert between that host-local data and global ``jax.Array``s laid out by
``(mesh, spec)``, with jax's own conversion underneath
(``jax.experimental.multihost_utils``) and shardc's checks in front of it: a
host-local shape that cannot be part of a valid global shape is an error
naming the dimension, its size and the divisor, before anything is sent.
"""

from __future__ import annotations

import math
from typing import Any

import jax
import numpy as np
from jax.experimental import multihost_utils
from jax.sharding import Mesh, PartitionSpec

from shardc.dialects import sdy
from shardc.dialects.errors import IndivisibleDimensionError, ShardcError


def local_blocks_per_dim(mesh: Mesh, spec: PartitionSpec, ndim: int) -> list[int]:
    """How many distinct shards of each dimension this process's devices hold."""
    local = {device.id for device in jax.local_devices()}
    position = {name: i for i, name in enumerate(mesh.axis_names)}
    coordinates = [
        index for index, device in np.ndenumerate(mesh.devices) if device.id in local
    ]
    dims = sdy.spec_dims(spec) + (None,) * (ndim - len(sdy.spec_dims(spec)))
    counts = []
    for entry in dims:
        axes = [position[name] for name in sdy.dim_axis_names(entry)]
        counts.append(len({tuple(c[a] for a in axes) for c in coordinates}))
    return counts


def global_shape(local_shape: tuple[int, ...], mesh: Mesh, spec: PartitionSpec) -> tuple:
    """The global shape a host-local block of ``local_shape`` stands for."""
    sizes = dict(sdy.mesh_axes(mesh))
    shape = []
    dims = sdy.spec_dims(spec) + (None,) * (len(local_shape) - len(sdy.spec_dims(spec)))
    local_counts = local_blocks_per_dim(mesh, spec, len(local_shape))
    for dim, (size, entry, local_count) in enumerate(zip(local_shape, dims, local_counts)):
        names = sdy.dim_axis_names(entry)
        total = math.prod(sizes[name] for name in names)
        global_size = size * (total // local_count)
        if global_size % total:
            axes = " * ".join(f"{name}={sizes[name]}" for name in names)
            raise IndivisibleDimensionError(
                f"host-local shape {tuple(local_shape)} with PartitionSpec {spec} implies "
                f"that the global size of its dimension {dim} should be divisible by "
                f"{total}, but it is equal to {global_size} (the axes are {axes}; process "
                f"{jax.process_index()} holds {local_count} of the {total} shards of that "
                "dimension)"
            )
        shape.append(global_size)
    return tuple(shape)


def host_local_to_global(data: Any, mesh: Mesh, spec: PartitionSpec) -> jax.Array:
    """Turn this process's block of an array into the global ``jax.Array``."""
    local = np.asarray(data)
    try:
        sdy.validate_spec(spec, mesh, local.ndim)
    except ShardcError as error:
        raise type(error)(f"host_local_to_global: {error}") from None
    global_shape(local.shape, mesh, spec)  # raises before any data moves
    return multihost_utils.host_local_array_to_global_array(local, mesh, spec)


def global_to_host_local(array: jax.Array, mesh: Mesh, spec: PartitionSpec) -> jax.Array:
    """This process's block of a global array (the inverse of ``host_local_to_global``)."""
    try:
        sdy.validate_spec(spec, mesh, array.ndim)
    except ShardcError as error:
        raise type(error)(f"global_to_host_local: {error}") from None
    return multihost_utils.global_array_to_host_local_array(array, mesh, spec)
