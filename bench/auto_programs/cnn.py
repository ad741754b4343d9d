"""A CNN train step: 3x3 convolutions (NHWC) with ReLU, average pooling between
stages, global pooling and a dense head. The expert layout splits the batch
and each kernel's output channels over ``model``, its input channels over the
FSDP axis."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from bench.auto_programs.layout import BATCH, EMBED, TENSOR, cross_entropy, sgd_step

NAME = "cnn"
SIZES = {
    "small": dict(image=16, channels=(8, 16, 32), classes=10, batch=8),
    "large": dict(image=128, channels=(64, 128, 256, 512), classes=1000, batch=1024),
}


def make(layout, size: str = "small") -> tuple:
    dims = SIZES[size]
    channels = (3, *dims["channels"])
    params = {
        "convs": [layout.param((3, 3, c_in, c_out), (None, None, EMBED if c_in > 3 else None,
                                                     TENSOR))
                  for c_in, c_out in zip(channels, channels[1:])],
        "head": layout.param((channels[-1], dims["classes"]), (EMBED, None)),
    }
    images = layout.batch((dims["batch"], dims["image"], dims["image"], 3))
    labels = layout.batch((dims["batch"],), jnp.int32)

    def loss(params, batch):
        x, labels = batch
        for k, kernel in enumerate(params["convs"]):
            x = jax.lax.conv_general_dilated(x, kernel, (1, 1), "SAME",
                                             dimension_numbers=("NHWC", "HWIO", "NHWC"))
            x = layout.constrain(jax.nn.relu(x), (BATCH, None, None, TENSOR))
            if k < len(params["convs"]) - 1:
                x = jax.lax.reduce_window(x, 0.0, jax.lax.add, (1, 2, 2, 1), (1, 2, 2, 1),
                                          "VALID") / 4.0
        logits = x.mean(axis=(1, 2)) @ params["head"]
        return cross_entropy(logits, labels)

    return sgd_step(loss), (params, (images, labels))
