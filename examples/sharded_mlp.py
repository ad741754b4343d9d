"""Lower a small two-layer MLP, sharded Megatron-style on a 4x2 mesh, with shardc.

Run: python examples/sharded_mlp.py
Prints the StableHLO module with the Shardy mesh and sharding attributes that
shardc wrote, then compiles it through XLA, runs it on 8 CPU devices and
prints the output's sharding, the collectives XLA inserted, and how far the
result is from jax.jit's.
"""

import os

# Eight CPU devices for the demo (the library itself never sets this flag).
os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax.sharding import AxisType, NamedSharding  # noqa: E402
from jax.sharding import PartitionSpec as P  # noqa: E402

from shardc.compiler import jit  # noqa: E402


def mlp(params, x):
    hidden = jax.nn.relu(x @ params["w1"] + params["b1"])
    return hidden @ params["w2"]


def main() -> None:
    mesh = jax.make_mesh((4, 2), ("data", "model"), axis_types=(AxisType.Auto,) * 2)
    params = {
        "w1": jax.ShapeDtypeStruct((16, 32), jnp.float32),
        "b1": jax.ShapeDtypeStruct((32,), jnp.float32),
        "w2": jax.ShapeDtypeStruct((32, 16), jnp.float32),
    }
    x = jax.ShapeDtypeStruct((8, 16), jnp.float32)
    param_specs = {"w1": P(None, "model"), "b1": P("model"), "w2": P("model", None)}
    lowered = jit(
        mlp,
        in_shardings=(param_specs, P("data")),
        out_shardings=NamedSharding(mesh, P("data")),
        mesh=mesh,
    ).lower(params, x)
    print(lowered.as_text(propagated=True))  # every value's sharding, as shardc decided

    compiled = lowered.compile()
    rng = np.random.default_rng(0)
    real_params = {k: rng.standard_normal(v.shape, np.float32) for k, v in params.items()}
    real_x = rng.standard_normal(x.shape, np.float32)
    out = compiled(real_params, real_x).block_until_ready()
    print("output sharding:", out.sharding.spec, "on mesh", dict(out.sharding.mesh.shape))
    used = {k: (c.count, c.bytes_per_device) for k, c in compiled.collectives().items() if c.count}
    print("collectives (count, bytes per device):", used)
    expected = jax.jit(mlp)(real_params, real_x)
    print("max |shardc - jax.jit|:", float(np.abs(np.asarray(out) - np.asarray(expected)).max()))


if __name__ == "__main__":
    main()
