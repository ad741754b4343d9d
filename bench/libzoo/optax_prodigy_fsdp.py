"""optax's learning-rate-free ``contrib.prodigy`` on an FSDP MLP.

``optax.chain(clip_by_global_norm, contrib.prodigy(weight_decay=...))`` applied
with ``optax.apply_updates`` under ``jax.jit``; the weights sharded over
``fsdp`` on their first axis and ``model`` on their second, the optimizer's
state (its estimates, ``p0``, moments) laid out like them, the batch over
``fsdp`` of a 4x2 mesh.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import optax
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from bench.models.program import Program, RandomArrays, check_size, make_mesh

NAME = "optax_prodigy_fsdp"
SIZES = {
    "small": dict(batch=16, d=32, hidden=64, layers=2),
    "large": dict(batch=256, d=512, hidden=2048, layers=4),
}


def init_params(d, rand):
    layers = []
    for _ in range(d["layers"]):
        layers.append(
            {
                "w_in": rand.normal((d["d"], d["hidden"])) * d["d"] ** -0.5,
                "b_in": jnp.zeros((d["hidden"],)),
                "w_out": rand.normal((d["hidden"], d["d"])) * d["hidden"] ** -0.5,
                "scale": jnp.ones((d["d"],)),
            }
        )
    return {"layers": layers, "head": rand.normal((d["d"], 1)) * d["d"] ** -0.5}


def forward(params, x):
    for l in params["layers"]:
        h = x * jax.lax.rsqrt(jnp.mean(x * x, -1, keepdims=True) + 1e-6) * l["scale"]
        x = x + jax.nn.relu(h @ l["w_in"] + l["b_in"]) @ l["w_out"]
    return (x @ params["head"])[:, 0]


def make(size="small"):
    check_size(size)
    d = SIZES[size]
    mesh = make_mesh((4, 2), ("fsdp", "model"))
    rand = RandomArrays(seed=1210)
    params = init_params(d, rand)
    tx = optax.chain(optax.clip_by_global_norm(1.0), optax.contrib.prodigy(1.0, weight_decay=1e-3))
    opt_state = tx.init(params)

    def spec(x):
        if x.ndim == 2 and x.shape[1] > 1:
            return NamedSharding(mesh, P("fsdp", "model"))
        return NamedSharding(mesh, P())

    p_sh = jax.tree.map(spec, params)
    o_sh = jax.tree.map(spec, opt_state)
    b_sh = NamedSharding(mesh, P("fsdp"))
    params, opt_state = jax.device_put(params, p_sh), jax.device_put(opt_state, o_sh)
    x = jax.device_put(rand.normal((d["batch"], d["d"])), b_sh)
    y = jax.device_put(rand.normal((d["batch"],)), b_sh)

    def step(params, opt_state, x, y):
        loss, grads = jax.value_and_grad(lambda p: jnp.mean((forward(p, x) - y) ** 2))(params)
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    return Program(
        name=NAME,
        description="optax chain(clip, contrib.prodigy) on FSDP MLP, 4x2",
        fun=step,
        args=(params, opt_state, x, y),
        in_shardings=(p_sh, o_sh, b_sh, b_sh),
        out_shardings=(p_sh, o_sh, None),
        mesh=mesh,
        donate_argnums=(0, 1),
    )
