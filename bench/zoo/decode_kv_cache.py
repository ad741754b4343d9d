"""One autoregressive decode step of a transformer with a donated KV cache.

The step takes the newest token of every sequence, its position, the weights
and the cache (keys and values of every layer: layers x batch x max_len x
heads x head_dim). Each layer projects the token to q, k, v, writes k and v
into the cache at ``position`` with ``lax.dynamic_update_slice``, attends over
the cache (positions past ``position`` masked), and runs its MLP; the logits'
argmax is the next token. The cache is donated (``donate_argnums``) and
returned updated, so it is updated in place. On a (data, model) mesh of
4 x 2: sequences on ``data``; heads (in the weights and the cache) and MLP
units on ``model``.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.sharding import PartitionSpec as P

from bench.models.program import Program, RandomArrays, check_size, make_mesh, place, shardings

NAME = "decode_kv_cache"
SIZES = {
    "small": dict(batch=8, max_len=16, vocab=64, d_model=32, heads=4, mlp=64, layers=2),
    "large": dict(batch=32, max_len=512, vocab=1024, d_model=512, heads=8, mlp=2048, layers=4),
}
LAYER_SPECS = {
    "w_q": P(None, "model", None), "w_k": P(None, "model", None), "w_v": P(None, "model", None),
    "w_o": P("model", None, None),
    "w_up": P(None, "model"), "w_down": P("model", None),
}  # fmt: skip
CACHE_SPEC = P(None, "data", None, "model", None)  # (layers, batch, max_len, heads, head_dim)


def rms_norm(x: jax.Array) -> jax.Array:
    return x * lax.rsqrt(jnp.mean(x * x, axis=-1, keepdims=True) + 1e-6)


def decode_step(params: dict, cache: dict, tokens: jax.Array, position: jax.Array):
    """``tokens`` (batch,) at ``position`` (a scalar) -> (next tokens, logits, new cache)."""
    x = params["embed"][tokens]  # (batch, d_model)
    max_len = cache["k"].shape[2]
    visible = jnp.arange(max_len) <= position
    keys, values = [], []
    for i, layer in enumerate(params["layers"]):
        h = rms_norm(x)
        q, k, v = (jnp.einsum("bd,dhk->bhk", h, layer[name]) for name in ("w_q", "w_k", "w_v"))
        k_cache = lax.dynamic_update_slice(cache["k"][i], k[:, None], (0, position, 0, 0))
        v_cache = lax.dynamic_update_slice(cache["v"][i], v[:, None], (0, position, 0, 0))
        keys.append(k_cache)
        values.append(v_cache)
        scores = jnp.einsum("bhk,bthk->bht", q, k_cache) * q.shape[-1] ** -0.5
        probs = jax.nn.softmax(jnp.where(visible, scores, -1e9), axis=-1)
        mixed = jnp.einsum("bht,bthk->bhk", probs, v_cache)
        x = x + jnp.einsum("bhk,hkd->bd", mixed, layer["w_o"])
        x = x + jax.nn.gelu(rms_norm(x) @ layer["w_up"]) @ layer["w_down"]
    logits = rms_norm(x) @ params["embed"].T
    new_cache = {"k": jnp.stack(keys), "v": jnp.stack(values)}
    return jnp.argmax(logits, axis=-1).astype(jnp.int32), logits, new_cache


def make(size: str = "small") -> Program:
    check_size(size)
    dims = SIZES[size]
    mesh = make_mesh((4, 2), ("data", "model"))
    rand = RandomArrays(seed=35)
    d_model, heads, mlp = dims["d_model"], dims["heads"], dims["mlp"]
    head_dim = d_model // heads
    params = {
        "embed": rand.normal((dims["vocab"], d_model)),
        "layers": [
            {
                "w_q": rand.weight((d_model, heads, head_dim)),
                "w_k": rand.weight((d_model, heads, head_dim)),
                "w_v": rand.weight((d_model, heads, head_dim)),
                "w_o": rand.normal((heads, head_dim, d_model), d_model**-0.5),
                "w_up": rand.weight((d_model, mlp)),
                "w_down": rand.weight((mlp, d_model)),
            }
            for _ in range(dims["layers"])
        ],
    }
    cache_shape = (dims["layers"], dims["batch"], dims["max_len"], heads, head_dim)
    position = dims["max_len"] // 2
    # A cache filled up to `position`, zeros after it.
    filled = (np.arange(dims["max_len"]) < position)[None, None, :, None, None]
    cache = {name: rand.normal(cache_shape) * filled for name in ("k", "v")}
    tokens = rand.integers(dims["vocab"], (dims["batch"],))
    param_specs = {"embed": P(), "layers": [LAYER_SPECS] * dims["layers"]}
    cache_specs = {"k": CACHE_SPEC, "v": CACHE_SPEC}
    in_shardings = shardings(mesh, (param_specs, cache_specs, P("data"), P()))
    return Program(
        name=NAME,
        description="decode step: dynamic_update_slice into a donated KV cache at a position "
        "argument, attention over the cache, argmax",
        fun=decode_step,
        args=place((params, cache, tokens, np.int32(position)), in_shardings),
        in_shardings=in_shardings,
        out_shardings=shardings(mesh, (P("data"), P("data"), cache_specs)),
        mesh=mesh,
        donate_argnums=(1,),
    )
