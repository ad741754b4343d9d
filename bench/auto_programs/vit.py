"""A ViT train step: patches embedded by one matmul, pre-norm encoder blocks
(the decoder's attention without a mask, a GELU MLP), mean pooling, a class head."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from bench.auto_programs.layout import BATCH, EMBED, TENSOR, cross_entropy, rms_norm, sgd_step
from bench.auto_programs.llama import attention, attention_params

NAME = "vit"
SIZES = {
    "small": dict(layers=2, image=32, patch=8, d=128, heads=4, ffn=256, classes=10, batch=8),
    "large": dict(layers=4, image=224, patch=16, d=1024, heads=16, ffn=4096, classes=1000,
                  batch=1024),
}


def make(layout, size: str = "small") -> tuple:
    dims = SIZES[size]
    d, patch, image = dims["d"], dims["patch"], dims["image"]
    patches = (image // patch) ** 2
    params = {
        "embed": layout.param((patch * patch * 3, d), (None, EMBED)),
        "position": layout.param((patches, d), (None, EMBED)),
        "layers": [{"attn": attention_params(layout, d),
                    "norm": layout.param((d,), (None,)),
                    "w1": layout.param((d, dims["ffn"]), (EMBED, TENSOR)),
                    "w2": layout.param((dims["ffn"], d), (TENSOR, EMBED))}
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
        x = x.reshape(b, patches, patch * patch * 3) @ params["embed"] + params["position"]
        for p in params["layers"]:
            x = attention(layout, p["attn"], x, dims["heads"], causal=False)
            h = layout.constrain(jax.nn.gelu(rms_norm(x, p["norm"]) @ p["w1"]),
                                 (BATCH, None, TENSOR))
            x = x + h @ p["w2"]
        logits = rms_norm(x, params["norm"]).mean(axis=1) @ params["head"]
        return cross_entropy(logits, labels)

    return sgd_step(loss), (params, (images, labels))
