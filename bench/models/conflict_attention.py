"""Attention whose queries are sequence-sharded but keys, values and output head-sharded.

The score einsum sees the same axis on the query sequence and on the heads:
Shardy keeps the query's sequence sharding (the first operand, same size),
which gathers keys and values and then re-shards the output to heads. Following
the keys' head sharding costs one all-to-all of the queries instead.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec as P

from bench.models.program import Program, RandomArrays, check_size, make_mesh, place, shardings

NAME = "conflict_attention"
SIZES = {
    "small": dict(seq=256, heads=8, head_dim=32),
    "large": dict(seq=1024, heads=16, head_dim=64),
}


def attention(q: jax.Array, k: jax.Array, v: jax.Array) -> jax.Array:
    scores = jnp.einsum("shd,thd->hst", q, k)
    probs = jax.nn.softmax(scores, axis=-1)
    return jnp.einsum("hst,thd->shd", probs, v)


def make(size: str = "small") -> Program:
    check_size(size)
    dims = SIZES[size]
    mesh = make_mesh((8,), ("x",))
    rand = RandomArrays(seed=22)
    shape = (dims["seq"], dims["heads"], dims["head_dim"])
    args = tuple(rand.normal(shape) for _ in range(3))
    heads = P(None, "x", None)
    in_shardings = shardings(mesh, (P("x", None, None), heads, heads))
    return Program(
        name=NAME,
        description="attention: queries sequence-sharded, keys/values/output head-sharded",
        fun=attention,
        args=place(args, in_shardings),
        in_shardings=in_shardings,
        out_shardings=shardings(mesh, heads),
        mesh=mesh,
    )
