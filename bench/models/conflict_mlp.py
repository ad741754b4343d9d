"""Megatron MLP with mismatched operand shardings (a real propagation conflict).

The activations are batch-sharded and both weights are sharded on their
*output* dimension over the same axis. The first matmul must choose between
the batch and the hidden factor; Shardy keeps the bigger tensor's (hidden),
which then forces a gather of the second weight. Sharding the second matmul
on its contracting dimension (one all-reduce) moves far fewer bytes: the
case ``propagation="cost-aware"`` is for.
"""

from __future__ import annotations

import jax
from jax.sharding import PartitionSpec as P

from bench.models.program import Program, RandomArrays, check_size, make_mesh, place, shardings

NAME = "conflict_mlp"
SIZES = {
    "small": dict(batch=64, d_model=256, d_hidden=1024),
    "large": dict(batch=256, d_model=1024, d_hidden=4096),
}


def mismatched_mlp(x: jax.Array, w_in: jax.Array, w_out: jax.Array) -> jax.Array:
    return jax.nn.relu(x @ w_in) @ w_out


def make_mlp(name: str, description: str, *, batch: int, d_model: int, d_hidden: int,
             seed: int, specs: tuple = (P("x", None), P(None, "x"), P(None, "x"))) -> Program:
    """``mismatched_mlp`` at the given sizes and input shardings, output batch-sharded."""
    mesh = make_mesh((8,), ("x",))
    rand = RandomArrays(seed=seed)
    args = (
        rand.normal((batch, d_model)),
        rand.weight((d_model, d_hidden)),
        rand.weight((d_hidden, d_model)),
    )
    in_shardings = shardings(mesh, specs)
    return Program(
        name=name,
        description=description,
        fun=mismatched_mlp,
        args=place(args, in_shardings),
        in_shardings=in_shardings,
        out_shardings=shardings(mesh, P("x", None)),
        mesh=mesh,
    )


def make(size: str = "small") -> Program:
    check_size(size)
    return make_mlp(NAME, "MLP, batch-sharded input, both weights output-sharded on one axis",
                    seed=21, **SIZES[size])
