"""An equinox encoder (``eqx.nn.MultiheadAttention``) trained by ``eqx.filter_grad``.

Blocks of ``eqx.nn.LayerNorm``, ``eqx.nn.MultiheadAttention`` (one sequence at
a time, ``jax.vmap`` over the batch) and ``eqx.nn.MLP``, a mean-pooled
``eqx.nn.Linear`` head; the step takes ``eqx.filter_grad`` of the loss (the
gradient of the model's arrays only), an SGD update by ``jax.tree.map`` and
``eqx.apply_updates``, and pins the new model with ``eqx.filter_shard``. Every
matrix is split over ``model`` along its second dimension, the batch over
``data`` (4x2 mesh); jitted by ``eqx.filter_jit`` (``filter_jit(...).lower(...).compile()``).
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from bench.libzoo.equinox_jit import filter_jit
from bench.models.program import Program, RandomArrays, check_size, make_mesh

NAME = "eqx_mha_filter_grad"
SIZES = {
    "small": dict(batch=8, seq=8, d=32, heads=4, layers=2),
    "large": dict(batch=64, seq=64, d=256, heads=8, layers=4),
}


class Block(eqx.Module):
    attn: eqx.nn.MultiheadAttention
    ln1: eqx.nn.LayerNorm
    ln2: eqx.nn.LayerNorm
    mlp: eqx.nn.MLP

    def __init__(self, d, heads, key):
        k1, k2 = jax.random.split(key)
        self.attn = eqx.nn.MultiheadAttention(heads, d, key=k1)
        self.ln1 = eqx.nn.LayerNorm(d)
        self.ln2 = eqx.nn.LayerNorm(d)
        self.mlp = eqx.nn.MLP(d, d, 2 * d, depth=1, activation=jax.nn.gelu, key=k2)

    def __call__(self, x):
        h = jax.vmap(self.ln1)(x)
        x = x + self.attn(h, h, h)
        return x + jax.vmap(self.mlp)(jax.vmap(self.ln2)(x))


class Encoder(eqx.Module):
    blocks: list
    head: eqx.nn.Linear

    def __init__(self, d, heads, layers, key):
        keys = jax.random.split(key, layers + 1)
        self.blocks = [Block(d, heads, k) for k in keys[:-1]]
        self.head = eqx.nn.Linear(d, 1, key=keys[-1])

    def __call__(self, x):
        for b in self.blocks:
            x = b(x)
        return self.head(x.mean(0))[0]


def make(size="small"):
    check_size(size)
    dims = SIZES[size]
    mesh = make_mesh((4, 2), ("data", "model"))
    model = Encoder(dims["d"], dims["heads"], dims["layers"], jax.random.key(11))

    def sharding(leaf):
        return NamedSharding(mesh, P(None, "model") if jnp.ndim(leaf) == 2 else P())

    model_shardings = jax.tree.map(sharding, eqx.filter(model, eqx.is_array))
    model = eqx.filter_shard(model, model_shardings)
    batch = NamedSharding(mesh, P("data"))
    rand = RandomArrays(seed=106)
    x = jax.device_put(rand.normal((dims["batch"], dims["seq"], dims["d"])), batch)
    y = jax.device_put(rand.normal((dims["batch"],)), batch)

    @eqx.filter_grad
    def grads_of(model, x, y):
        return jnp.mean((jax.vmap(model)(x) - y) ** 2)

    def train_step(model, x, y):
        grads = grads_of(model, x, y)
        updates = jax.tree.map(lambda g: -0.05 * g, grads)
        model = eqx.apply_updates(model, updates)
        return eqx.filter_shard(model, model_shardings)

    return Program(
        name=NAME,
        description="eqx MultiheadAttention/LayerNorm/MLP encoder, filter_jit + filter_grad, apply_updates",
        fun=train_step,
        args=(model, x, y),
        in_shardings=(model_shardings, batch, batch),
        out_shardings=None,
        mesh=mesh,
        jit=filter_jit,
    )
