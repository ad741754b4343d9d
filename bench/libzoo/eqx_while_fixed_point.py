"""A deep-equilibrium layer in equinox: a fixed point found by a checkpointed while loop.

``z = tanh(W z + U x)`` iterated by ``eqx.internal.while_loop(kind='checkpointed',
max_steps=..., checkpoints=...)`` until it stops moving, so that the loss is
differentiated through the loop (its backward branches on the step inside a
loop); ``eqx.filter_vmap`` over the batch, ``eqx.filter_value_and_grad`` and
``optax.sgd`` with momentum under ``eqx.filter_jit``; ``W`` sharded over
``model``, the batch over ``data`` of a 4x2 mesh.
"""

from __future__ import annotations

import equinox as eqx
import equinox.internal as eqxi
import jax
import jax.numpy as jnp
import optax
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from bench.libzoo.equinox_jit import filter_jit
from bench.models.program import Program, RandomArrays, check_size, make_mesh

NAME = "eqx_while_fixed_point"
SIZES = {
    "small": dict(batch=16, d_in=8, d=32, classes=4, steps=12),
    "large": dict(batch=256, d_in=64, d=512, classes=10, steps=30),
}


class DEQ(eqx.Module):
    inp: eqx.nn.Linear
    w: jax.Array
    out: eqx.nn.Linear
    steps: int = eqx.field(static=True)

    def __init__(self, d, key):
        k1, k2, k3 = jax.random.split(key, 3)
        self.inp = eqx.nn.Linear(d["d_in"], d["d"], key=k1)
        self.w = 0.3 * jax.random.normal(k2, (d["d"], d["d"])) / d["d"] ** 0.5
        self.out = eqx.nn.Linear(d["d"], d["classes"], key=k3)
        self.steps = d["steps"]

    def __call__(self, x):
        u = self.inp(x)

        def cond(carry):
            i, z, delta = carry
            return delta > 1e-6

        def body(carry):
            i, z, _ = carry
            z_new = jnp.tanh(self.w @ z + u)
            return i + 1, z_new, jnp.max(jnp.abs(z_new - z))

        _, z, _ = eqxi.while_loop(
            cond,
            body,
            (0, jnp.zeros_like(u), jnp.array(1.0)),
            max_steps=self.steps,
            kind="checkpointed",
            checkpoints=4,
        )
        return self.out(z)


def make(size="small"):
    check_size(size)
    d = SIZES[size]
    mesh = make_mesh((4, 2), ("data", "model"))
    model = DEQ(d, jax.random.key(3))
    rep = NamedSharding(mesh, P())
    shard = jax.tree_util.tree_map_with_path(
        lambda path, leaf: (
            NamedSharding(mesh, P("model", None)) if getattr(path[-1], "name", "") == "w" else rep
        ),
        eqx.filter(model, eqx.is_array),
    )
    model = eqx.filter_shard(model, shard)
    tx = optax.sgd(0.1, momentum=0.9)
    opt_state = tx.init(eqx.filter(model, eqx.is_array))
    rand = RandomArrays(seed=1202)
    sh = NamedSharding(mesh, P("data"))
    x = jax.device_put(rand.normal((d["batch"], d["d_in"])), sh)
    y = jax.device_put(rand.integers(d["classes"], (d["batch"],)), sh)

    def step(model, opt_state, x, y):
        def loss_fn(model):
            logits = eqx.filter_vmap(model)(x)
            return optax.softmax_cross_entropy_with_integer_labels(logits, y).mean()

        loss, grads = eqx.filter_value_and_grad(loss_fn)(model)
        updates, opt_state = tx.update(grads, opt_state)
        return eqx.apply_updates(model, updates), opt_state, loss

    def jit(jit_function, fun):
        return filter_jit(jit_function, fun)

    return Program(
        name=NAME,
        description="eqxi.while_loop(kind='checkpointed') DEQ fixed point, grad through loop, 4x2",
        fun=step,
        args=(model, opt_state, x, y),
        in_shardings=None,
        out_shardings=None,
        mesh=mesh,
        jit=jit,
    )
