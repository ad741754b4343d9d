"""Flax NNX blocks made by ``nnx.vmap`` over split RNG streams, scanned, branching by ``nnx.switch``.

The way NNX's "scan over layers" guide builds a stack: ``nnx.split_rngs`` splits the
``params`` and ``dropout`` streams and ``nnx.vmap`` (``transform_metadata`` adding the layer
axis to the partition metadata) creates one block per key, so every layer carries its own
dropout stream; ``nnx.scan`` applies them with the activations as the carry. Each block picks
its activation with ``nnx.switch`` on a per-layer index held in an ``nnx.Variable`` and scales
its residual with ``nnx.cond`` on the update's size. The step is ``nnx.jit``-ed with the model
and an ``nnx.Optimizer(adamw, wrt=nnx.Param)`` donated; the kernels are split over ``model``
by ``nnx.with_partitioning``, the batch over ``data`` of a 2x4 mesh.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import optax
from flax import nnx
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from bench.libzoo.nnx_jit import nnx_jit
from bench.models.program import Program, RandomArrays, check_size, make_mesh

NAME = "nnx_scan_rngs_switch"
SIZES = {
    "small": dict(batch=16, d=32, hidden=64, layers=3),
    "large": dict(batch=64, d=256, hidden=1024, layers=4),
}
ACTIVATIONS = (nnx.gelu, nnx.relu, nnx.silu)


class Block(nnx.Module):
    def __init__(self, d: int, hidden: int, rngs: nnx.Rngs):
        init = nnx.initializers.lecun_normal()
        self.up = nnx.Linear(d, hidden, rngs=rngs,
                             kernel_init=nnx.with_partitioning(init, (None, "model")))
        self.down = nnx.Linear(hidden, d, rngs=rngs,
                               kernel_init=nnx.with_partitioning(init, ("model", None)))
        self.norm = nnx.LayerNorm(d, rngs=rngs)
        self.drop = nnx.Dropout(0.1, rngs=rngs)
        self.kind = nnx.Variable(jnp.int32(0))

    def __call__(self, x):
        branches = [lambda block, h, act=act: act(h) for act in ACTIVATIONS]
        h = nnx.switch(self.kind[...] % len(ACTIVATIONS), branches, self, self.up(self.norm(x)))
        h = self.down(self.drop(h))
        return nnx.cond(jnp.mean(h * h) > 10.0, lambda block, x, h: x + 0.1 * h,
                        lambda block, x, h: x + h, self, x, h)  # fmt: skip


class Net(nnx.Module):
    def __init__(self, d: int, hidden: int, layers: int, rngs: nnx.Rngs):
        @nnx.split_rngs(splits=layers)
        @nnx.vmap(in_axes=(0,), out_axes=0, transform_metadata={nnx.PARTITION_NAME: None})
        def create(rngs):
            return Block(d, hidden, rngs)

        self.blocks = create(rngs)
        self.blocks.kind[...] = jnp.arange(layers, dtype=jnp.int32)
        self.head = nnx.Linear(d, 1, rngs=rngs)

    def __call__(self, x):
        @nnx.scan(in_axes=(nnx.Carry, 0), out_axes=nnx.Carry,
                  transform_metadata={nnx.PARTITION_NAME: None})
        def apply(x, block):
            return block(x)

        return self.head(apply(x, self.blocks))


def train_step(model, optimizer, x, y):
    def loss_fn(model):
        return jnp.mean((model(x)[:, 0] - y) ** 2)

    loss, grads = nnx.value_and_grad(loss_fn)(model)
    optimizer.update(model, grads)
    return loss


def make(size: str = "small") -> Program:
    check_size(size)
    dims = SIZES[size]
    mesh = make_mesh((2, 4), ("data", "model"))
    with jax.set_mesh(mesh):
        model = Net(dims["d"], dims["hidden"], dims["layers"], nnx.Rngs(params=0, dropout=1))
        optimizer = nnx.Optimizer(model, optax.adamw(1e-3, weight_decay=1e-4), wrt=nnx.Param)
    for obj in (model, optimizer):
        state = nnx.state(obj)
        nnx.update(obj, jax.device_put(state, nnx.get_named_sharding(state, mesh)))
    rand = RandomArrays(seed=1401)
    batch = NamedSharding(mesh, P("data"))
    x = jax.device_put(rand.normal((dims["batch"], dims["d"])), batch)
    y = jax.device_put(rand.normal((dims["batch"],)), batch)

    def jit(jit_function, fun):
        return nnx_jit(jit_function, fun, donate_argnums=(0, 1))

    return Program(
        name=NAME,
        description="NNX blocks by nnx.vmap over split_rngs, nnx.scan with per-layer dropout"
        " streams, nnx.switch / nnx.cond, Optimizer(adamw, wrt=Param), nnx.jit donated, 2x4",
        fun=train_step,
        args=(model, optimizer, x, y),
        in_shardings=None,
        out_shardings=None,
        mesh=mesh,
        donate_argnums=(0, 1),
        jit=jit,
    )
