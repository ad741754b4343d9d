"""Dropout with typed PRNG keys, and ``lax.cond`` / ``lax.switch`` on sharded operands.

The step takes a typed key (``jax.random.key``: an array of dtype
``key<fry>``) as an argument, splits it, and returns the next key beside the
loss and the gradients, the way a training loop threads its randomness. Inside
the differentiated loss: inverted dropout on hidden activations split over
``data`` and ``model`` (``jax.random.bernoulli`` with the partitionable
threefry, each device drawing its own block), a ``lax.cond`` on a value of the
data (the batch mean decides between two activations), and a ``lax.switch`` on
an integer argument choosing one of three output layers. On a (data, model)
mesh of 4 x 2. Like most users' ``jax.jit(step)``, the program names no input
shardings: the arguments are placed on the mesh and the computation follows them.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.sharding import PartitionSpec as P

from bench.models.program import Program, RandomArrays, check_size, make_mesh, place, shardings

NAME = "dropout_cond"
SIZES = {
    "small": dict(batch=16, features=16, hidden=32),
    "large": dict(batch=512, features=512, hidden=2048),
}
DROPOUT = 0.25
PARAM_SPECS = {"w_in": P(None, "model"), "w_out": P("model", None), "scale": P("model")}


def dropout(key: jax.Array, x: jax.Array, rate: float) -> jax.Array:
    keep = jax.random.bernoulli(key, 1.0 - rate, x.shape)
    return jnp.where(keep, x / (1.0 - rate), 0.0)


def loss_fn(params: dict, x: jax.Array, key: jax.Array, branch: jax.Array) -> jax.Array:
    h = dropout(key, x @ params["w_in"], DROPOUT)
    h = lax.cond(jnp.mean(h) > 0, jax.nn.relu, jnp.tanh, h)
    out = lax.switch(
        branch,
        [
            lambda h: h @ params["w_out"],
            lambda h: jax.nn.gelu(h * params["scale"]) @ params["w_out"],
            lambda h: (h * h) @ params["w_out"],
        ],
        h,
    )
    return jnp.mean((out - x) ** 2)


def step(params: dict, x: jax.Array, key: jax.Array, branch: jax.Array):
    key, dropout_key = jax.random.split(key)
    loss, grads = jax.value_and_grad(loss_fn)(params, x, dropout_key, branch)
    return loss, grads, key


def make(size: str = "small") -> Program:
    check_size(size)
    dims = SIZES[size]
    mesh = make_mesh((4, 2), ("data", "model"))
    rand = RandomArrays(seed=38)
    features, hidden = dims["features"], dims["hidden"]
    params = {
        "w_in": rand.weight((features, hidden)),
        "w_out": rand.weight((hidden, features)),
        "scale": 1 + rand.normal((hidden,), 0.1),
    }
    x = rand.normal((dims["batch"], features))
    specs = (PARAM_SPECS, P("data"), P(), P())
    args = (params, x, jax.random.key(7), np.int32(1))
    return Program(
        name=NAME,
        description="dropout from a typed jax.random.key argument (next key returned), "
        "lax.cond on data, lax.switch on an index",
        fun=step,
        args=place(args, shardings(mesh, specs)),
        in_shardings=None,  # follow the placed arguments
        out_shardings=shardings(mesh, (P(), PARAM_SPECS, P())),
        mesh=mesh,
    )
