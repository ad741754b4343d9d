"""A GPT-2 train step: LayerNorm with biases, learned positions, one fused q/k/v
projection, a GELU MLP, and the token embedding tied to the output projection
(read by the lookup and, transposed, by the logits' dot). The expert layout is
the decoder's: embedding dimension over the FSDP axis, heads, hidden units and
the vocabulary over ``model``.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from bench.auto_programs.layout import BATCH, EMBED, TENSOR, cross_entropy, sgd_step

NAME = "gpt2"
SIZES = {
    "small": dict(layers=2, d=128, heads=4, vocab=512, seq=64, batch=8),
    "large": dict(layers=6, d=2048, heads=16, vocab=50304, seq=1024, batch=512),
}


def layer_norm(x, g, b):
    m = x.mean(-1, keepdims=True)
    v = ((x - m) ** 2).mean(-1, keepdims=True)
    return (x - m) * jax.lax.rsqrt(v + 1e-5) * g + b


def make(layout, size="small"):
    dims = SIZES[size]
    d, vocab, seq, heads = dims["d"], dims["vocab"], dims["seq"], dims["heads"]

    def block():
        return {"ln1g": layout.param((d,), (None,)), "ln1b": layout.param((d,), (None,)),
                "qkv": layout.param((d, 3 * d), (EMBED, TENSOR)),
                "bqkv": layout.param((3 * d,), (TENSOR,)),
                "proj": layout.param((d, d), (TENSOR, EMBED)), "bproj": layout.param((d,), (None,)),
                "ln2g": layout.param((d,), (None,)), "ln2b": layout.param((d,), (None,)),
                "fc": layout.param((d, 4 * d), (EMBED, TENSOR)),
                "bfc": layout.param((4 * d,), (TENSOR,)),
                "out": layout.param((4 * d, d), (TENSOR, EMBED)), "bout": layout.param((d,), (None,))}
    params = {"wte": layout.param((vocab, d), (TENSOR, EMBED)),
              "wpe": layout.param((seq, d), (None, EMBED)),
              "blocks": [block() for _ in range(dims["layers"])],
              "lnfg": layout.param((d,), (None,)), "lnfb": layout.param((d,), (None,))}
    tokens = layout.batch((dims["batch"], seq + 1), jnp.int32)

    def loss(params, tokens):
        inputs, targets = tokens[:, :-1], tokens[:, 1:]
        x = params["wte"][inputs] + params["wpe"][None]
        b, s, _ = x.shape
        mask = jnp.tril(jnp.ones((s, s), bool))
        for p in params["blocks"]:
            x = layout.constrain(x, (BATCH, None, None))
            h = layer_norm(x, p["ln1g"], p["ln1b"])
            qkv = h @ p["qkv"] + p["bqkv"]
            q, k, v = (layout.constrain(t.reshape(b, s, heads, d // heads), (BATCH, None, TENSOR, None))
                       for t in jnp.split(qkv, 3, axis=-1))
            sc = jnp.einsum("bqhd,bkhd->bhqk", q, k) / jnp.sqrt(d // heads)
            sc = jnp.where(mask, sc, -1e9)
            o = jnp.einsum("bhqk,bkhd->bqhd", jax.nn.softmax(sc, -1), v).reshape(b, s, d)
            x = x + o @ p["proj"] + p["bproj"]
            h = layer_norm(x, p["ln2g"], p["ln2b"])
            hid = layout.constrain(jax.nn.gelu(h @ p["fc"] + p["bfc"]), (BATCH, None, TENSOR))
            x = x + hid @ p["out"] + p["bout"]
        h = layer_norm(x, params["lnfg"], params["lnfb"])
        logits = layout.constrain(h @ params["wte"].T, (BATCH, None, TENSOR))
        return cross_entropy(logits, targets)

    return sgd_step(loss), (params, tokens)
