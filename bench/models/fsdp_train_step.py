"""FSDP train step: value_and_grad and an SGD update with every parameter split 8 ways.

Parameters and batch are both sharded over the one ``data`` axis; a
well-partitioned step all-gathers each weight for use and reduce-scatters its
gradient back to the parameter's sharding, which the updated parameters keep.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec as P

from bench.models.program import Program, RandomArrays, check_size, make_mesh, place, shardings

NAME = "fsdp_train_step"
SIZES = {
    "small": dict(batch=64, width=128, depth=3),
    "large": dict(batch=512, width=1024, depth=4),
}
LEARNING_RATE = 0.05


def loss(params: list, x: jax.Array, y: jax.Array) -> jax.Array:
    for layer in params[:-1]:
        x = jnp.tanh(x @ layer["w"] + layer["b"])
    prediction = x @ params[-1]["w"] + params[-1]["b"]
    return jnp.mean((prediction - y) ** 2)


def train_step(params: list, x: jax.Array, y: jax.Array):
    value, grads = jax.value_and_grad(loss)(params, x, y)
    new_params = jax.tree.map(lambda p, g: p - LEARNING_RATE * g, params, grads)
    return value, new_params


def make(size: str = "small") -> Program:
    check_size(size)
    dims = SIZES[size]
    mesh = make_mesh((8,), ("data",))
    rand = RandomArrays(seed=3)
    width = dims["width"]
    params = [
        {"w": rand.weight((width, width)), "b": rand.normal((width,), 0.1)}
        for _ in range(dims["depth"])
    ]
    x = rand.normal((dims["batch"], width))
    y = rand.normal((dims["batch"], width))
    param_specs = [{"w": P("data", None), "b": P("data")} for _ in params]
    in_shardings = shardings(mesh, (param_specs, P("data"), P("data")))
    return Program(
        name=NAME,
        description="value_and_grad + SGD update, parameters and batch sharded 8 ways",
        fun=train_step,
        args=place((params, x, y), in_shardings),
        in_shardings=in_shardings,
        out_shardings=shardings(mesh, (P(), param_specs)),
        mesh=mesh,
    )
