"""Collectives written in manual computations (``shard_map`` bodies), as XLA compiles them."""

from functools import partial

import jax
import numpy as np
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P

from shardc.compiler import jit


def test_repeated_written_collectives_are_one():
    """A ``shard_map`` body that writes the same ``psum`` and ``all_gather`` twice: XLA's
    common-subexpression elimination keeps one of each (their channels aside, the two
    are the same instruction on the same operand)."""
    grid = jax.make_mesh((4, 2), ("data", "model"), axis_types=(AxisType.Auto,) * 2)

    @partial(jax.shard_map, mesh=grid, in_specs=P("data", "model"),
             out_specs=P("data", "model"))
    def body(x):
        summed = jax.lax.psum(x, "model") + jax.lax.psum(x, "model")
        gathered = (jax.lax.all_gather(x, "data", tiled=True)
                    + jax.lax.all_gather(x, "data", tiled=True))
        return summed + gathered.sum(0, keepdims=True)

    x = jax.device_put(np.arange(32 * 64, dtype=np.float32).reshape(32, 64),
                       NamedSharding(grid, P("data", "model")))
    lowered = jit(body).lower(x)
    predicted = {k: (t.bytes_per_device, t.count)
                 for k, t in lowered.comm_report().totals().items() if t.count}
    compiled = lowered.compile()
    assert predicted == {k: (c.bytes_per_device, c.count)
                         for k, c in compiled.collectives().items() if c.count}
    assert predicted == {"all-gather": (4096, 1), "all-reduce": (1024, 1)}
    np.testing.assert_array_equal(compiled(x), jax.jit(body)(x))
