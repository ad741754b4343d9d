"""Embedding lookup (gather) and the table's gradient by scatter-add.

Token ids are split over ``data``, the table's feature dimension over
``model``. The program returns the mean-pooled embeddings and the table
update ``zeros.at[ids].add(upstream)`` that an embedding's backward pass
computes; both output shardings are left to the partitioner.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec as P

from bench.models.program import Program, RandomArrays, check_size, make_mesh, place, shardings

NAME = "embedding_scatter"
SIZES = {
    "small": dict(batch=16, seq=8, vocab=128, features=32),
    "large": dict(batch=256, seq=128, vocab=32768, features=512),
}


def embed_and_scatter(table: jax.Array, ids: jax.Array, upstream: jax.Array):
    embedded = jnp.take(table, ids, axis=0)  # (batch, seq, features): a gather
    pooled = embedded.mean(axis=1)
    # The backward pass of the lookup: every token's upstream row is added to
    # its id's row; repeated ids accumulate.
    table_update = jnp.zeros_like(table).at[ids.reshape(-1)].add(
        (upstream * embedded).reshape(-1, table.shape[1])
    )
    return pooled, table_update


def make(size: str = "small") -> Program:
    check_size(size)
    dims = SIZES[size]
    mesh = make_mesh((4, 2), ("data", "model"))
    rand = RandomArrays(seed=6)
    table = rand.normal((dims["vocab"], dims["features"]))
    ids = rand.integers(dims["vocab"], (dims["batch"], dims["seq"]))
    upstream = rand.normal((dims["batch"], dims["seq"], dims["features"]))
    in_shardings = shardings(mesh, (P(None, "model"), P("data"), P("data", None, "model")))
    return Program(
        name=NAME,
        description="jnp.take lookup + .at[ids].add table gradient; ids on `data`",
        fun=embed_and_scatter,
        args=place((table, ids, upstream), in_shardings),
        in_shardings=in_shardings,
        out_shardings=None,
        mesh=mesh,
    )
