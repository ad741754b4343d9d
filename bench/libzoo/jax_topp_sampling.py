"""Nucleus (top-p) and top-k sampling the way LM serving code writes it.

Logits from a vocabulary-sharded head, ``jnp.argsort(descending=True)`` and
``take_along_axis``, a softmax ``jnp.cumsum`` mask scattered back to vocabulary
order, ``jax.lax.top_k`` for top-k, a temperature, ``jax.random.categorical``
over a batch of typed key arrays (``fold_in`` / ``split`` per row); the batch
over ``data`` and the vocabulary over ``model`` of a 2x4 mesh.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from bench.models.program import Program, RandomArrays, check_size, make_mesh

NAME = "jax_topp_sampling"
SIZES = {
    "small": dict(batch=8, d=32, vocab=128, k=8),
    "large": dict(batch=64, d=256, vocab=4096, k=40),
}


def top_p_logits(logits, p):
    order = jnp.argsort(logits, axis=-1, descending=True)
    sorted_logits = jnp.take_along_axis(logits, order, axis=-1)
    cum = jnp.cumsum(jax.nn.softmax(sorted_logits, axis=-1), axis=-1)
    keep_sorted = cum - jax.nn.softmax(sorted_logits, axis=-1) < p
    keep = (
        jnp.zeros_like(keep_sorted).at[jnp.arange(logits.shape[0])[:, None], order].set(keep_sorted)
    )
    return jnp.where(keep, logits, -jnp.inf)


def top_k_logits(logits, k):
    vals, _ = jax.lax.top_k(logits, k)
    return jnp.where(logits < vals[:, -1:], -jnp.inf, logits)


def sample(w, h, keys, temperature, p, k):
    logits = (h @ w) / temperature
    nucleus = jax.vmap(jax.random.categorical)(keys, top_p_logits(logits, p))
    topk = jax.vmap(jax.random.categorical)(
        jax.vmap(lambda kk: jax.random.fold_in(kk, 1))(keys), top_k_logits(logits, k)
    )
    logprobs = jax.nn.log_softmax(logits)
    chosen = jnp.take_along_axis(logprobs, nucleus[:, None], axis=-1)[:, 0]
    new_keys = jax.vmap(lambda kk: jax.random.split(kk)[0])(keys)
    return nucleus, topk, chosen, new_keys


def make(size="small"):
    check_size(size)
    d = SIZES[size]
    mesh = make_mesh((2, 4), ("data", "model"))
    rand = RandomArrays(seed=1301)
    w = jax.device_put(rand.weight((d["d"], d["vocab"])), NamedSharding(mesh, P(None, "model")))
    h = jax.device_put(rand.normal((d["batch"], d["d"])), NamedSharding(mesh, P("data")))
    keys = jax.device_put(
        jax.random.split(jax.random.key(7), d["batch"]), NamedSharding(mesh, P("data"))
    )
    fun = lambda w, h, keys: sample(w, h, keys, 0.8, 0.9, d["k"])
    return Program(
        name=NAME,
        description="top-p/top-k sampling: argsort, cumsum, top_k, categorical on key arrays, 2x4",
        fun=fun,
        args=(w, h, keys),
        in_shardings=None,
        out_shardings=None,
        mesh=mesh,
    )
