"""flax NNX layers stacked by ``nnx.vmap`` and run by ``nnx.scan``, on a mesh of Explicit axes.

As flax's NNX "scan over layers" guide writes it: ``@nnx.split_rngs`` +
``@nnx.vmap`` create one ``Block`` per layer (``nnx.Linear`` with
``nnx.with_partitioning`` kernels, ``nnx.LayerNorm``, ``nnx.Dropout``), and
``@nnx.scan`` + ``@nnx.remat`` run them over the carry. The mesh's axes are
``AxisType.Explicit`` (sharding in types, flax's eager sharding): parameters
are created sharded under ``jax.set_mesh``, the activations' shardings are
part of their types (the down projection, contracting over ``model``, names
its ``out_sharding``), and the batch is ``jax.sharding.reshard``-ed onto
``data``. The step is ``nnx.split`` / ``nnx.merge`` around
``nnx.value_and_grad`` and an ``nnx.Optimizer`` (adamw) update, jitted under
``jax.set_mesh`` with the state donated; dropout's RNG state is part of the
split state, so every call advances it.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import optax
from flax import nnx
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P

from bench.models.program import Program, RandomArrays, check_size

NAME = "flax_nnx_scan_explicit"
SIZES = {
    "small": dict(batch=16, features=32, hidden=64, layers=3),
    "large": dict(batch=256, features=512, hidden=2048, layers=12),
}


class Block(nnx.Module):
    def __init__(self, features: int, hidden: int, rngs: nnx.Rngs):
        init = nnx.initializers.lecun_normal()
        self.norm = nnx.LayerNorm(features, rngs=rngs)
        self.up = nnx.Linear(features, hidden, rngs=rngs,
                             kernel_init=nnx.with_partitioning(init, (None, "model")))
        self.down = nnx.Linear(hidden, features, rngs=rngs,
                               kernel_init=nnx.with_partitioning(init, ("model", None)))
        self.dropout = nnx.Dropout(0.1, rngs=rngs)

    def __call__(self, x: jax.Array) -> jax.Array:
        hidden = jax.nn.gelu(self.up(self.norm(x)))
        return x + self.dropout(self.down(hidden, out_sharding=P("data", None)))


class Stack(nnx.Module):
    def __init__(self, features: int, hidden: int, layers: int, rngs: nnx.Rngs):
        @nnx.split_rngs(splits=layers)
        @nnx.vmap(in_axes=(0,), out_axes=0, transform_metadata={nnx.PARTITION_NAME: None})
        def create_block(rngs: nnx.Rngs):
            return Block(features, hidden, rngs)

        self.blocks = create_block(rngs)

    def __call__(self, x: jax.Array) -> jax.Array:
        @nnx.scan(in_axes=(nnx.Carry, 0), out_axes=nnx.Carry)
        @nnx.remat
        def forward(x, block: Block):
            return block(x)

        return forward(x, self.blocks)


def make_train_step(graphdef):
    def train_step(state, x, y):
        model, optimizer = nnx.merge(graphdef, state)
        x = jax.sharding.reshard(x, P("data"))

        def loss_fn(model):
            return jnp.mean((model(x) - y) ** 2)

        loss, grads = nnx.value_and_grad(loss_fn)(model)
        optimizer.update(model, grads)
        return nnx.state((model, optimizer)), loss

    return train_step


def make(size: str = "small") -> Program:
    check_size(size)
    dims = SIZES[size]
    mesh = jax.make_mesh((4, 2), ("data", "model"), axis_types=(AxisType.Explicit,) * 2)
    with jax.set_mesh(mesh):
        model = Stack(dims["features"], dims["hidden"], dims["layers"],
                      rngs=nnx.Rngs(params=0, dropout=1))
        optimizer = nnx.Optimizer(model, optax.adamw(1e-3, weight_decay=0.01), wrt=nnx.Param)
        graphdef, state = nnx.split((model, optimizer))
    state_shardings = jax.tree.map(lambda leaf: leaf.sharding, state)
    rand = RandomArrays(seed=97)
    batch = NamedSharding(mesh, P("data"))
    replicated = NamedSharding(mesh, P())
    x = jax.device_put(rand.normal((dims["batch"], dims["features"])), replicated)
    y = jax.device_put(rand.normal((dims["batch"], dims["features"])), batch)
    return Program(
        name=NAME,
        description="flax NNX nnx.vmap-created blocks run by nnx.scan + nnx.remat (Dropout "
        "RNG state), Explicit mesh axes, reshard, nnx.Optimizer adamw, donated",
        fun=make_train_step(graphdef),
        args=(state, x, y),
        in_shardings=(state_shardings, replicated, batch),
        out_shardings=None,
        mesh=mesh,
        donate_argnums=(0,),
        mesh_context=True,
    )
