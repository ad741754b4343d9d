"""Data-parallel MLP: loss and gradients with replicated weights and a batch split 8 ways.

The gradients are summed over the batch shards (one all-reduce per weight);
their output shardings are left to the partitioner.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec as P

from bench.models.program import Program, RandomArrays, check_size, make_mesh, place, shardings

NAME = "mlp_data_parallel"
SIZES = {
    "small": dict(batch=64, width=64, depth=3),
    "large": dict(batch=1024, width=512, depth=4),
}


def mlp(weights: list, x: jax.Array) -> jax.Array:
    for w in weights[:-1]:
        x = jax.nn.gelu(x @ w)
    return x @ weights[-1]


def loss(weights: list, x: jax.Array, y: jax.Array) -> jax.Array:
    return jnp.mean((mlp(weights, x) - y) ** 2)


def loss_and_grads(weights: list, x: jax.Array, y: jax.Array):
    return jax.value_and_grad(loss)(weights, x, y)


def make(size: str = "small") -> Program:
    check_size(size)
    dims = SIZES[size]
    mesh = make_mesh((8,), ("data",))
    rand = RandomArrays(seed=1)
    width = dims["width"]
    weights = [rand.weight((width, width)) for _ in range(dims["depth"])]
    x = rand.normal((dims["batch"], width))
    y = rand.normal((dims["batch"], width))
    in_shardings = shardings(mesh, ([P()] * len(weights), P("data"), P("data")))
    return Program(
        name=NAME,
        description="value_and_grad of an MLP; weights replicated, batch on 8 devices",
        fun=loss_and_grads,
        args=place((weights, x, y), in_shardings),
        in_shardings=in_shardings,
        out_shardings=None,
        mesh=mesh,
    )
