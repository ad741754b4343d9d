"""A Llama-like decoder train step: RMSNorm, multi-head causal attention, SwiGLU MLP.

The expert layout is MaxText's: weights FSDP x TP (embedding dimension over
the FSDP axis, heads and hidden units over ``model``), activations batch-split
with heads and hidden units over ``model``.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from bench.auto_programs.layout import BATCH, EMBED, TENSOR, cross_entropy, rms_norm, sgd_step

NAME = "llama"
SIZES = {
    "small": dict(layers=2, d=128, heads=4, ffn=256, vocab=512, seq=64, batch=8),
    # Llama-2-7B's widths, 8 of its 32 layers
    "large": dict(layers=8, d=4096, heads=32, ffn=11008, vocab=32000, seq=2048, batch=1024),
}


def attention_params(layout, d: int) -> dict:
    return {"norm": layout.param((d,), (None,)),
            "wq": layout.param((d, d), (EMBED, TENSOR)), "wk": layout.param((d, d), (EMBED, TENSOR)),
            "wv": layout.param((d, d), (EMBED, TENSOR)), "wo": layout.param((d, d), (TENSOR, EMBED))}


def attention(layout, p: dict, x, heads: int, causal: bool):
    """``x + attention(norm(x))``, heads split over ``model`` in the expert layout."""
    x = layout.constrain(x, (BATCH, None, None))
    batch, seq, d = x.shape
    h = rms_norm(x, p["norm"])
    q, k, v = (layout.constrain((h @ p[w]).reshape(batch, seq, heads, d // heads),
                                (BATCH, None, TENSOR, None)) for w in ("wq", "wk", "wv"))
    scores = jnp.einsum("bqhd,bkhd->bhqk", q, k) / jnp.sqrt(d // heads).astype(x.dtype)
    if causal:
        scores = jnp.where(jnp.tril(jnp.ones((seq, seq), bool)), scores, -1e9)
    out = jnp.einsum("bhqk,bkhd->bqhd", jax.nn.softmax(scores, axis=-1), v)
    return x + out.reshape(batch, seq, d) @ p["wo"]


def mlp_params(layout, d: int, ffn: int) -> dict:
    return {"norm": layout.param((d,), (None,)), "w1": layout.param((d, ffn), (EMBED, TENSOR)),
            "w3": layout.param((d, ffn), (EMBED, TENSOR)),
            "w2": layout.param((ffn, d), (TENSOR, EMBED))}


def mlp(layout, p: dict, x):
    h = rms_norm(x, p["norm"])
    hidden = layout.constrain(jax.nn.silu(h @ p["w1"]) * (h @ p["w3"]), (BATCH, None, TENSOR))
    return x + hidden @ p["w2"]


def decoder(layout, dims: dict, ffn_params, ffn) -> tuple:
    """The step and its arguments for a decoder whose MLP is ``ffn`` (its weights
    ``ffn_params(layout)``)."""
    d, vocab = dims["d"], dims["vocab"]
    params = {"embed": layout.param((vocab, d), (TENSOR, EMBED)),
              "layers": [{"attn": attention_params(layout, d), "mlp": ffn_params(layout)}
                         for _ in range(dims["layers"])],
              "norm": layout.param((d,), (None,)), "out": layout.param((d, vocab), (EMBED, TENSOR))}
    tokens = layout.batch((dims["batch"], dims["seq"] + 1), jnp.int32)

    def loss(params, tokens):
        inputs, targets = tokens[:, :-1], tokens[:, 1:]
        x = params["embed"][inputs]
        for p in params["layers"]:
            x = ffn(layout, p["mlp"], attention(layout, p["attn"], x, dims["heads"], causal=True))
        logits = layout.constrain(rms_norm(x, params["norm"]) @ params["out"],
                                  (BATCH, None, TENSOR))
        return cross_entropy(logits, targets)

    return sgd_step(loss), (params, tokens)


def make(layout, size: str = "small") -> tuple:
    dims = SIZES[size]
    return decoder(layout, dims, lambda lay: mlp_params(lay, dims["d"], dims["ffn"]), mlp)
