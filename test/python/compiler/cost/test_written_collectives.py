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


def test_a_body_result_sharded_on_free_axes_is_resharded_to_the_out_sharding():
    """A partial-manual ``shard_map`` (manual over ``data``) on Explicit axes whose body
    computes ``x @ w`` sharded on ``model`` but returns it under the out-sharding
    ``P("data")`` (replicated on ``model``): XLA all-gathers the body's result over
    ``model`` as it leaves the body (and slices it again for the declared result)."""
    grid = jax.make_mesh((4, 2), ("data", "model"),
                         axis_types=(AxisType.Explicit, AxisType.Explicit))

    def fun(x, w):
        @partial(jax.shard_map, mesh=grid, in_specs=(P("data"), P()), out_specs=P("data"),
                 axis_names={"data"})
        def body(xb, wb):
            h = xb @ wb
            return jax.lax.psum(h.sum(0, keepdims=True), "data") + h
        return body(x, w)

    rand = np.random.default_rng(0)
    with jax.set_mesh(grid):
        x = jax.device_put(rand.standard_normal((32, 64)).astype(np.float32),
                           NamedSharding(grid, P("data")))
        w = jax.device_put(rand.standard_normal((64, 128)).astype(np.float32),
                           NamedSharding(grid, P(None, "model")))
        lowered = jit(fun).lower(x, w)
        report = lowered.comm_report()
        predicted = {k: t.bytes_per_device for k, t in report.totals().items() if t.count}
        compiled = lowered.compile()
        assert predicted == {k: c.bytes_per_device
                             for k, c in compiled.collectives().items() if c.count}
        assert any(e.op == "sdy.return" and e.kind == "all-gather" and e.bytes_per_device == 4096
                   for e in report.entries)
        np.testing.assert_allclose(compiled(x, w), jax.jit(fun)(x, w), rtol=1e-5, atol=1e-4)
