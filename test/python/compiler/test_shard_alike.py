"""``shard_alike`` through shardc's jit: the sharding a value's group resolves to
reaches XLA, as under jax.jit (``inspect_array_sharding`` reads XLA's)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.experimental.shard_alike import shard_alike
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from shardc.compiler import jit


def _inspected(jit_fn, differentiate):
    mesh = Mesh(np.array(jax.devices()[:4]), ("x",))
    inp = jax.device_put(np.arange(8.0), NamedSharding(mesh, P("x")))
    seen = []

    def f(x):
        y = jnp.arange(8.0)  # an iota: a constant XLA splits again
        x_, y_ = shard_alike(x, y)
        jax.debug.inspect_array_sharding(y_, callback=seen.append)
        return jnp.sum(x_ + y_)

    g = jit_fn(f)
    out = jax.grad(g)(inp) if differentiate else g(inp)
    return [s.spec for s in seen], np.asarray(out)


@pytest.mark.parametrize("differentiate", [False, True])
def test_shard_alike_iota_keeps_its_group_sharding(differentiate):
    if len(jax.devices()) < 4:
        pytest.skip("needs 4 devices")
    ours, ours_out = _inspected(jit, differentiate)
    theirs, theirs_out = _inspected(jax.jit, differentiate)
    assert ours == theirs == [P("x")]
    np.testing.assert_array_equal(ours_out, theirs_out)
