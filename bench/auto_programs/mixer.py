"""An MLP-Mixer train step, a program AUTO was not tuned on: patches embedded by
one matmul, blocks of a token-mixing MLP (across the patches, through
transposing einsums) and a channel-mixing MLP, mean pooling, a class head. The
expert layout shards the batch, both MLPs' hidden units over ``model`` and the
channel weights' embedding over the FSDP axis, the hidden activations pinned
likewise."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from bench.auto_programs.layout import BATCH, EMBED, TENSOR, cross_entropy, rms_norm, sgd_step

NAME = "mixer"
SIZES = {
    "small": dict(layers=2, image=32, patch=4, d=128, tokens=128, ffn=256, classes=10, batch=8),
    "large": dict(layers=8, image=224, patch=16, d=1024, tokens=512, ffn=4096, classes=1000,
                  batch=1024),
}


def make(layout, size: str = "small") -> tuple:
    dims = SIZES[size]
    d, patch, image = dims["d"], dims["patch"], dims["image"]
    patches = (image // patch) ** 2
    params = {
        "embed": layout.param((patch * patch * 3, d), (None, EMBED)),
        "layers": [{"norm1": layout.param((d,), (None,)),
                    "t1": layout.param((patches, dims["tokens"]), (None, TENSOR)),
                    "t2": layout.param((dims["tokens"], patches), (TENSOR, None)),
                    "norm2": layout.param((d,), (None,)),
                    "c1": layout.param((d, dims["ffn"]), (EMBED, TENSOR)),
                    "c2": layout.param((dims["ffn"], d), (TENSOR, EMBED))}
                   for _ in range(dims["layers"])],
        "norm": layout.param((d,), (None,)),
        "head": layout.param((d, dims["classes"]), (EMBED, None)),
    }
    images = layout.batch((dims["batch"], image, image, 3))
    labels = layout.batch((dims["batch"],), jnp.int32)

    def loss(params, batch):
        images, labels = batch
        b = images.shape[0]
        grid = image // patch
        x = images.reshape(b, grid, patch, grid, patch, 3).transpose(0, 1, 3, 2, 4, 5)
        x = layout.constrain(x.reshape(b, patches, patch * patch * 3) @ params["embed"],
                             (BATCH, None, None))
        for p in params["layers"]:
            mixed = layout.constrain(
                jax.nn.gelu(jnp.einsum("bpd,pt->bdt", rms_norm(x, p["norm1"]), p["t1"])),
                (BATCH, None, TENSOR))
            x = layout.constrain(x + jnp.einsum("bdt,tp->bpd", mixed, p["t2"]),
                                 (BATCH, None, None))
            hidden = layout.constrain(jax.nn.gelu(rms_norm(x, p["norm2"]) @ p["c1"]),
                                      (BATCH, None, TENSOR))
            x = layout.constrain(x + hidden @ p["c2"], (BATCH, None, None))
        logits = rms_norm(x, params["norm"]).mean(axis=1) @ params["head"]
        return cross_entropy(logits, labels)

    return sgd_step(loss), (params, (images, labels))
