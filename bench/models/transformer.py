"""A multi-layer pre-LayerNorm transformer on a 2-D (data, model) mesh.

Megatron layout: the batch is split over ``data``; attention heads (the
query/key/value projections' output columns) and the MLP's hidden units are
split over ``model``. Each layer reshapes to heads, runs causal softmax
attention, and adds residuals around both blocks. The output sharding is left
to the partitioner.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec as P

from bench.models.program import Program, RandomArrays, check_size, make_mesh, place, shardings

NAME = "transformer"
SIZES = {
    "small": dict(batch=4, seq=16, d_model=64, heads=4, layers=2),
    "large": dict(batch=8, seq=128, d_model=512, heads=8, layers=4),
}
LAYER_SPECS = {
    "ln1_scale": P(), "ln1_bias": P(),
    "w_qkv": P(None, None, "model"),  # (d_model, 3, heads * head_dim): heads on `model`
    "w_out": P("model", None),
    "ln2_scale": P(), "ln2_bias": P(),
    "w_up": P(None, "model"),
    "w_down": P("model", None),
}  # fmt: skip


def layer_norm(x: jax.Array, scale: jax.Array, bias: jax.Array) -> jax.Array:
    mean = x.mean(axis=-1, keepdims=True)
    variance = ((x - mean) ** 2).mean(axis=-1, keepdims=True)
    return (x - mean) * jax.lax.rsqrt(variance + 1e-5) * scale + bias


def attention(layer: dict, x: jax.Array, heads: int) -> jax.Array:
    batch, seq, _ = x.shape
    qkv = jnp.einsum("bsd,dkf->bskf", x, layer["w_qkv"])  # k: query, key, value
    qkv = qkv.reshape(batch, seq, 3, heads, -1)
    q, k, v = qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2]  # (batch, seq, heads, head_dim)
    scores = jnp.einsum("bqhd,bkhd->bhqk", q, k) * q.shape[-1] ** -0.5
    causal = jnp.tril(jnp.ones((seq, seq), dtype=bool))
    scores = jnp.where(causal, scores, jnp.finfo(x.dtype).min)
    probs = jax.nn.softmax(scores, axis=-1)
    mixed = jnp.einsum("bhqk,bkhd->bqhd", probs, v).reshape(batch, seq, -1)
    return mixed @ layer["w_out"]


def transformer(layers: list, x: jax.Array, heads: int) -> jax.Array:
    for layer in layers:
        x = x + attention(layer, layer_norm(x, layer["ln1_scale"], layer["ln1_bias"]), heads)
        normed = layer_norm(x, layer["ln2_scale"], layer["ln2_bias"])
        x = x + jax.nn.gelu(normed @ layer["w_up"]) @ layer["w_down"]
    return x


def make(size: str = "small") -> Program:
    check_size(size)
    dims = SIZES[size]
    mesh = make_mesh((2, 4), ("data", "model"))
    rand = RandomArrays(seed=4)
    d_model, heads = dims["d_model"], dims["heads"]
    layers = [
        {
            "ln1_scale": 1 + rand.normal((d_model,), 0.1),
            "ln1_bias": rand.normal((d_model,), 0.1),
            "w_qkv": rand.normal((d_model, 3, d_model), d_model**-0.5),
            "w_out": rand.weight((d_model, d_model)),
            "ln2_scale": 1 + rand.normal((d_model,), 0.1),
            "ln2_bias": rand.normal((d_model,), 0.1),
            "w_up": rand.weight((d_model, 4 * d_model)),
            "w_down": rand.weight((4 * d_model, d_model)),
        }
        for _ in range(dims["layers"])
    ]
    x = rand.normal((dims["batch"], dims["seq"], d_model))
    in_shardings = shardings(mesh, ([LAYER_SPECS] * len(layers), P("data")))

    def forward(layers, x):
        return transformer(layers, x, heads)

    return Program(
        name=NAME,
        description=f"{dims['layers']}-layer transformer; heads, MLP on `model`, batch on `data`",
        fun=forward,
        args=place((layers, x), in_shardings),
        in_shardings=in_shardings,
        out_shardings=None,
        mesh=mesh,
    )
