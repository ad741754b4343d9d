"""Compiled.verify: sharded against unsharded outputs, raising above tolerance."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

import shardc.compiler as sc
from shardc.runtime.verify import VerificationError


def _mlp(x, w1, w2):
    return {"out": jnp.tanh(x @ w1) @ w2, "norm": jnp.sum(x * x)}


@pytest.fixture(scope="module")
def compiled():
    mesh = jax.make_mesh((2, 4), ("data", "model"), axis_types=(jax.sharding.AxisType.Auto,) * 2)
    ins = (NamedSharding(mesh, P("data")), NamedSharding(mesh, P(None, "model")),
           NamedSharding(mesh, P("model", None)))
    args = (np.random.default_rng(0).standard_normal((8, 16), np.float32),
            np.random.default_rng(1).standard_normal((16, 32), np.float32),
            np.random.default_rng(2).standard_normal((32, 4), np.float32))
    return sc.jit(_mlp, in_shardings=ins).lower(*args).compile(), args


def test_sharded_matches_unsharded(compiled):
    program, args = compiled
    report = program.verify(*args, rtol=1e-4, atol=1e-4)
    assert report.ok and len(report.outputs) == 2
    assert all(o.max_abs < 1e-4 for o in report.outputs)
    assert "['out']" in report.format_text()


def test_wrong_reference_raises_with_the_differences(compiled):
    program, args = compiled

    def wrong(x, w1, w2):
        result = _mlp(x, w1, w2)
        return {"out": result["out"] + 0.5, "norm": result["norm"]}

    with pytest.raises(VerificationError) as error:
        program.verify(*args, reference=jax.jit(wrong))
    assert isinstance(error.value, ValueError)
    (bad,) = [o for o in error.value.report.outputs if not o.ok]
    assert bad.path == "['out']" and abs(bad.max_abs - 0.5) < 1e-5


def test_verify_with_donated_arguments():
    # Regression: verify ran the program first, then read the (donated, deleted) inputs.
    mesh = jax.make_mesh((8,), ("d",), axis_types=(jax.sharding.AxisType.Auto,))
    x = jax.device_put(jnp.arange(16.0), jax.sharding.NamedSharding(mesh, P("d")))
    compiled = sc.jit(lambda a: a * 2, P("d"), P("d"), mesh=mesh, donate_argnums=0).lower(x).compile()
    assert compiled.verify(x).ok
    assert x.is_deleted()
