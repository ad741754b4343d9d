"""A flax NNX model sharded the way flax's "Scale up on multiple devices" guide does it.

``nnx.Linear`` layers whose kernels are created through
``nnx.with_partitioning(init, (None, "model"))`` / ``(("model", None))``; the
model is created inside ``nnx.jit`` under ``jax.set_mesh``, its state pinned
to ``nnx.get_partition_spec(nnx.state(model))`` with
``jax.lax.with_sharding_constraint`` and written back with ``nnx.update``, as
the guide does. The optimizer is ``nnx.Optimizer(model, optax.adamw(...),
wrt=nnx.Param)``, whose moment variables inherit the kernels' sharding
metadata. The train step is the guide's functional form of ``nnx.jit``:
``nnx.split`` of ``(model, optimizer)`` outside, ``nnx.merge`` inside,
``nnx.value_and_grad`` and ``optimizer.update(model, grads)``, the new
``nnx.state`` returned; its activation constraint is a bare ``PartitionSpec``
(the mesh comes from ``jax.set_mesh``). The shardings are
``nnx.get_named_sharding`` of the split state, and the state is donated.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import optax
from flax import nnx
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from bench.models.program import Program, RandomArrays, check_size, make_mesh

NAME = "flax_nnx_sharded"
SIZES = {
    "small": dict(batch=16, features=32, hidden=64),
    "large": dict(batch=256, features=1024, hidden=4096),
}


class DotReluDot(nnx.Module):
    def __init__(self, features: int, hidden: int, rngs: nnx.Rngs):
        init = nnx.initializers.lecun_normal()
        self.dot1 = nnx.Linear(features, hidden, use_bias=False, rngs=rngs,
                               kernel_init=nnx.with_partitioning(init, (None, "model")))
        self.dot2 = nnx.Linear(hidden, features, rngs=rngs,
                               kernel_init=nnx.with_partitioning(init, ("model", None)),
                               bias_init=nnx.with_partitioning(nnx.initializers.zeros_init(),
                                                               (None,)))

    def __call__(self, x: jax.Array) -> jax.Array:
        y = jax.nn.relu(self.dot1(x))
        y = jax.lax.with_sharding_constraint(y, P("data", "model"))
        return self.dot2(y)


def create_sharded_model(features: int, hidden: int, mesh) -> DotReluDot:
    @nnx.jit
    def create():
        model = DotReluDot(features, hidden, rngs=nnx.Rngs(0))
        state = nnx.state(model)
        pspecs = nnx.get_partition_spec(state)
        nnx.update(model, jax.lax.with_sharding_constraint(state, pspecs))
        return model

    with jax.set_mesh(mesh):
        return create()


def make_train_step(graphdef):
    def train_step(state, x, y):
        model, optimizer = nnx.merge(graphdef, state)

        def loss_fn(model):
            return jnp.mean((model(x) - y) ** 2)

        loss, grads = nnx.value_and_grad(loss_fn)(model)
        optimizer.update(model, grads)
        return nnx.state((model, optimizer)), loss

    return train_step


def make(size: str = "small") -> Program:
    check_size(size)
    dims = SIZES[size]
    mesh = make_mesh((4, 2), ("data", "model"))
    model = create_sharded_model(dims["features"], dims["hidden"], mesh)
    with jax.set_mesh(mesh):  # the moments are created sharded like their parameters
        optimizer = nnx.Optimizer(model, optax.adamw(1e-3, weight_decay=0.01), wrt=nnx.Param)
    graphdef, state = nnx.split((model, optimizer))
    state_shardings = nnx.get_named_sharding(state, mesh)
    state = jax.device_put(state, state_shardings)
    batch = NamedSharding(mesh, P("data"))
    rand = RandomArrays(seed=53)
    x = jax.device_put(rand.normal((dims["batch"], dims["features"])), batch)
    y = jax.device_put(rand.normal((dims["batch"], dims["features"])), batch)
    return Program(
        name=NAME,
        description="flax NNX DotReluDot (nnx.with_partitioning, get_partition_spec), "
        "nnx.Optimizer adamw, split/merge step, bare-spec constraint under set_mesh, donated",
        fun=make_train_step(graphdef),
        args=(state, x, y),
        in_shardings=(state_shardings, batch, batch),
        out_shardings=(state_shardings, NamedSharding(mesh, P())),
        mesh=mesh,
        donate_argnums=(0,),
        mesh_context=True,
    )
