"""A T5-like encoder-decoder train step: RMSNorm, a bidirectional encoder, a causal
decoder whose cross-attention reads the encoder's output (keys and values of
another length than the queries), ReLU MLPs, one embedding shared by both
stacks. The expert layout is the decoder's (FSDP x TP, activations batch-split).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from bench.auto_programs.layout import BATCH, EMBED, TENSOR, cross_entropy, rms_norm, sgd_step

NAME = "t5"
SIZES = {
    "small": dict(layers=2, d=128, heads=4, ffn=256, vocab=512, src=64, tgt=32, batch=8),
    "large": dict(layers=4, d=1024, heads=16, ffn=4096, vocab=32128, src=512, tgt=128, batch=512),
}


def attn_params(layout, d):
    return {"norm": layout.param((d,), (None,)),
            **{w: layout.param((d, d), (EMBED, TENSOR)) for w in ("q", "k", "v")},
            "o": layout.param((d, d), (TENSOR, EMBED))}


def attend(layout, p, x, ctx, heads, causal):
    b, s, d = x.shape
    h = rms_norm(x, p["norm"])
    kv = h if ctx is None else ctx
    t = kv.shape[1]
    q = layout.constrain((h @ p["q"]).reshape(b, s, heads, d // heads), (BATCH, None, TENSOR, None))
    k = layout.constrain((kv @ p["k"]).reshape(b, t, heads, d // heads), (BATCH, None, TENSOR, None))
    v = layout.constrain((kv @ p["v"]).reshape(b, t, heads, d // heads), (BATCH, None, TENSOR, None))
    sc = jnp.einsum("bqhd,bkhd->bhqk", q, k)
    if causal:
        sc = jnp.where(jnp.tril(jnp.ones((s, t), bool)), sc, -1e9)
    o = jnp.einsum("bhqk,bkhd->bqhd", jax.nn.softmax(sc, -1), v).reshape(b, s, d)
    return x + o @ p["o"]


def ffn_params(layout, d, f):
    return {"norm": layout.param((d,), (None,)), "wi": layout.param((d, f), (EMBED, TENSOR)),
            "wo": layout.param((f, d), (TENSOR, EMBED))}


def ffn(layout, p, x):
    h = layout.constrain(jax.nn.relu(rms_norm(x, p["norm"]) @ p["wi"]), (BATCH, None, TENSOR))
    return x + h @ p["wo"]


def make(layout, size="small"):
    dm = SIZES[size]
    d, f, heads = dm["d"], dm["ffn"], dm["heads"]
    params = {"embed": layout.param((dm["vocab"], d), (TENSOR, EMBED)),
              "enc": [{"attn": attn_params(layout, d), "ffn": ffn_params(layout, d, f)}
                      for _ in range(dm["layers"])],
              "dec": [{"self": attn_params(layout, d), "cross": attn_params(layout, d),
                       "ffn": ffn_params(layout, d, f)} for _ in range(dm["layers"])],
              "enc_norm": layout.param((d,), (None,)), "dec_norm": layout.param((d,), (None,)),
              "lm_head": layout.param((d, dm["vocab"]), (EMBED, TENSOR))}
    src = layout.batch((dm["batch"], dm["src"]), jnp.int32)
    tgt = layout.batch((dm["batch"], dm["tgt"] + 1), jnp.int32)

    def loss(params, batch):
        src, tgt = batch
        x = params["embed"][src]
        for p in params["enc"]:
            x = layout.constrain(x, (BATCH, None, None))
            x = ffn(layout, p["ffn"], attend(layout, p["attn"], x, None, heads, False))
        enc = rms_norm(x, params["enc_norm"])
        y = params["embed"][tgt[:, :-1]]
        for p in params["dec"]:
            y = layout.constrain(y, (BATCH, None, None))
            y = attend(layout, p["self"], y, None, heads, True)
            y = attend(layout, p["cross"], y, enc, heads, False)
            y = ffn(layout, p["ffn"], y)
        logits = layout.constrain(rms_norm(y, params["dec_norm"]) @ params["lm_head"], (BATCH, None, TENSOR))
        return cross_entropy(logits, tgt[:, 1:])

    return sgd_step(loss), (params, (src, tgt))
