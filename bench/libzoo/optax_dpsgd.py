"""Differentially private SGD as optax's DP example writes it: per-example gradients.

``jax.vmap(jax.grad(loss), in_axes=(None, 0, 0))`` gives one gradient per
example of a batch split over ``data`` (a 1-D mesh of 8), fed to
``optax.contrib.dpsgd``, which clips each example's gradient to
``l2_norm_clip``, sums them and adds Gaussian noise drawn from the key it
keeps in its state (``noise_multiplier``); replicated MLP parameters and the
optimizer state are donated. The per-example gradients carry the batch axis,
so their sum over it is the step's collective.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import optax
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from bench.models.program import Program, RandomArrays, check_size, make_mesh, place

NAME = "optax_dpsgd"
SIZES = {
    "small": dict(batch=32, features=12, hidden=16, classes=5),
    "large": dict(batch=512, features=256, hidden=1024, classes=10),
}


def make_optimizer() -> optax.GradientTransformation:
    return optax.contrib.dpsgd(learning_rate=0.1, l2_norm_clip=1.0, noise_multiplier=0.5, seed=7)


def loss_fn(params, x, y):
    hidden = jax.nn.relu(x @ params["w1"] + params["b1"])
    return optax.softmax_cross_entropy_with_integer_labels(hidden @ params["w2"], y)


def make_train_step(optimizer: optax.GradientTransformation):
    def train_step(params, opt_state, x, y):
        per_example = jax.vmap(jax.grad(loss_fn), in_axes=(None, 0, 0))(params, x, y)
        updates, opt_state = optimizer.update(per_example, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, jnp.mean(loss_fn(params, x, y))

    return train_step


def make(size: str = "small") -> Program:
    check_size(size)
    dims = SIZES[size]
    mesh = make_mesh((8,), ("data",))
    rand = RandomArrays(seed=53)
    replicated = NamedSharding(mesh, P())
    params = place({
        "w1": rand.weight((dims["features"], dims["hidden"])), "b1": rand.normal((dims["hidden"],), 0.1),
        "w2": rand.weight((dims["hidden"], dims["classes"])),
    }, {"w1": replicated, "b1": replicated, "w2": replicated})  # fmt: skip
    optimizer = make_optimizer()
    opt_state = jax.device_put(optimizer.init(params), replicated)
    batch = NamedSharding(mesh, P("data"))
    x = rand.normal((dims["batch"], dims["features"]))
    y = rand.integers(dims["classes"], (dims["batch"],))
    return Program(
        name=NAME,
        description="optax.contrib.dpsgd on per-example grads (vmap of grad) over a batch split "
        "8 ways, noise from the state's key, donated",
        fun=make_train_step(optimizer),
        args=(params, opt_state, *place((x, y), (batch, batch))),
        in_shardings=(replicated, replicated, batch, batch),
        out_shardings=(replicated, replicated, replicated),
        mesh=mesh,
        donate_argnums=(0, 1),
    )
