"""The Llama-like decoder with a top-1 mixture-of-experts MLP (Switch style:
a router, each expert's buffer of ``capacity`` tokens, one-hot dispatch and
combine einsums). The expert layout splits the experts over ``model`` (expert
parallelism: the dispatched tokens move by all-to-all) and each expert's
embedding dimension over the FSDP axis.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from bench.auto_programs.layout import BATCH, EMBED, TENSOR, rms_norm
from bench.auto_programs.llama import decoder

NAME = "llama_moe"
SIZES = {
    "small": dict(layers=2, d=128, heads=4, ffn=128, experts=4, vocab=512, seq=64, batch=8),
    "large": dict(layers=8, d=4096, heads=32, ffn=4096, experts=16, vocab=32000, seq=2048,
                  batch=1024),
}
CAPACITY_FACTOR = 1.25


def moe_params(layout, d: int, ffn: int, experts: int) -> dict:
    return {"norm": layout.param((d,), (None,)), "router": layout.param((d, experts), (EMBED, None)),
            "w1": layout.param((experts, d, ffn), (TENSOR, EMBED, None)),
            "w2": layout.param((experts, ffn, d), (TENSOR, None, EMBED))}


def moe_mlp(layout, p: dict, x):
    batch, seq, _ = x.shape
    experts = p["router"].shape[1]
    capacity = int(CAPACITY_FACTOR * seq / experts)
    h = rms_norm(x, p["norm"])
    probs = jax.nn.softmax(h @ p["router"], axis=-1)  # (b, s, e)
    chosen = jax.nn.one_hot(jnp.argmax(probs, axis=-1), experts, dtype=x.dtype)
    position = (jnp.cumsum(chosen, axis=1) - 1) * chosen
    kept = chosen * (position < capacity)
    slots = jax.nn.one_hot(jnp.sum(position * kept, axis=-1).astype(jnp.int32), capacity,
                           dtype=x.dtype)  # (b, s, c)
    dispatch = jnp.einsum("bse,bsc->bsec", kept, slots)
    combine = dispatch * jnp.sum(probs * kept, axis=-1)[..., None, None]
    tokens = layout.constrain(jnp.einsum("bsec,bsd->becd", dispatch, h),
                              (BATCH, TENSOR, None, None))
    hidden = jax.nn.silu(jnp.einsum("becd,edf->becf", tokens, p["w1"]))
    out = layout.constrain(jnp.einsum("becf,efd->becd", hidden, p["w2"]),
                           (BATCH, TENSOR, None, None))
    return x + jnp.einsum("becd,bsec->bsd", out, combine)


def make(layout, size: str = "small") -> tuple:
    dims = SIZES[size]
    return decoder(layout, dims,
                   lambda lay: moe_params(lay, dims["d"], dims["ffn"], dims["experts"]), moe_mlp)
