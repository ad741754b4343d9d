"""Shard grids and shard shapes: computed per mesh axis, equal to placing every device."""

from itertools import product

import jax
import numpy as np
import pytest
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from shardc.compiler.explain.grid import grid_of_array, grid_of_sharding, shard_shape
from shardc.compiler.sharding.axes import AxisRef, full_axis
from shardc.compiler.sharding.tensor import DimSharding, TensorSharding

SIZES = {"x": 4, "y": 2}


def _placed(shape, sharding, sizes):
    """Each device's shard index, device by device (what the grid must equal)."""
    names = list(sizes)
    dims = sharding.dims if sharding is not None else ()
    devices = {}
    for device, coords in enumerate(product(*(range(sizes[n]) for n in names))):
        at = dict(zip(names, coords))
        index = []
        for d in range(len(shape)):
            position = 0
            for axis in (dims[d].axes if d < len(dims) else ()):
                position = position * axis.size + (at[axis.name] // axis.pre) % axis.size
            index.append(position)
        devices.setdefault(tuple(index), []).append(device)
    return {k: tuple(v) for k, v in devices.items()}


def _sharding(*dims):
    return TensorSharding("mesh", tuple(DimSharding(tuple(axes), True) for axes in dims))


X, Y = full_axis("x", 4), full_axis("y", 2)
CASES = [
    ((8, 6), None),
    ((8, 6), _sharding([X], [])),
    ((8, 6), _sharding([Y], [X])),
    ((8, 6), _sharding([X, Y], [])),
    ((7, 5), _sharding([Y, X], [])),  # padded: 8 shards of 7 rows
    ((8,), _sharding([AxisRef("x", 2, 2, 4)])),  # the minor half of x
    ((8, 4, 2), _sharding([AxisRef("x", 1, 2, 4)], [Y], [AxisRef("x", 2, 2, 4)])),
    ((), _sharding()),
]


@pytest.mark.parametrize("shape,sharding", CASES)
def test_grid_equals_placing_every_device(shape, sharding):
    grid = grid_of_sharding(shape, sharding, SIZES)
    assert dict(grid.devices) == _placed(shape, sharding, SIZES)
    assert grid.shard_shape() == shard_shape(shape, sharding)


def test_grid_of_sharding_matches_jax_placement():
    mesh = jax.make_mesh((4, 2), ("x", "y"), axis_types=(jax.sharding.AxisType.Auto,) * 2)
    array = jax.device_put(np.zeros((8, 4)), NamedSharding(mesh, P("y", "x")))
    mine = grid_of_sharding((8, 4), _sharding([Y], [X]), SIZES)
    theirs = grid_of_array(array)
    assert mine.splits == theirs.splits
    ids = [d.id for d in mesh.devices.flat]  # logical device i is the mesh's i-th device
    assert {k: tuple(sorted(ids[i] for i in v)) for k, v in mine.devices.items()} == \
        dict(theirs.devices)


def test_shard_shape_needs_no_devices():
    # 16,384 devices: the shard shape is read off the sharding alone
    data, model = full_axis("data", 1024), full_axis("model", 16)
    assert shard_shape((4096, 11008), _sharding([data], [model])) == (4, 688)
    grid = grid_of_sharding((4096, 11008), _sharding([data], [model]),
                            {"data": 1024, "model": 16})
    assert len(grid.devices) == 16384 and grid.shard_shape() == (4, 688)
