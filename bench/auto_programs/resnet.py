"""A ResNet train step: 3x3 convolutions (NHWC) with BatchNorm on the batch's
statistics (a reduction over the batch and both spatial dimensions), residual
blocks, stride-2 convolutions and 1x1 projections between stages, global
pooling and a dense head. The expert layout is the CNN's: output channels (and
BatchNorm's scales) over ``model``, input channels over the FSDP axis.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from bench.auto_programs.layout import BATCH, EMBED, TENSOR, cross_entropy, sgd_step

NAME = "resnet"
SIZES = {
    "small": dict(image=16, widths=(16, 32), blocks=1, classes=10, batch=8),
    "large": dict(image=112, widths=(64, 128, 256), blocks=2, classes=1000, batch=1024),
}


def conv(x, k, stride=1):
    return jax.lax.conv_general_dilated(x, k, (stride, stride), "SAME",
                                        dimension_numbers=("NHWC", "HWIO", "NHWC"))


def bn(x, g, b):
    m = x.mean((0, 1, 2))
    v = ((x - m) ** 2).mean((0, 1, 2))
    return (x - m) * jax.lax.rsqrt(v + 1e-5) * g + b


def make(layout, size="small"):
    dm = SIZES[size]
    w = dm["widths"]

    def kern(ci, co, k=3):
        return layout.param((k, k, ci, co), (None, None, EMBED if ci > 3 else None, TENSOR))

    def vec(c):
        return layout.param((c,), (TENSOR,))
    params = {"stem": kern(3, w[0]), "stem_g": vec(w[0]), "stem_b": vec(w[0]), "stages": []}
    cin = w[0]
    for i, c in enumerate(w):
        stage = []
        for j in range(dm["blocks"]):
            blk = {"k1": kern(cin, c), "g1": vec(c), "b1": vec(c), "k2": kern(c, c), "g2": vec(c), "b2": vec(c)}
            if cin != c:
                blk["proj"] = kern(cin, c, 1)
            stage.append(blk)
            cin = c
        params["stages"].append(stage)
    params["head"] = layout.param((cin, dm["classes"]), (EMBED, None))
    images = layout.batch((dm["batch"], dm["image"], dm["image"], 3))
    labels = layout.batch((dm["batch"],), jnp.int32)

    def loss(params, batch):
        x, y = batch
        x = jax.nn.relu(bn(conv(x, params["stem"]), params["stem_g"], params["stem_b"]))
        for i, stage in enumerate(params["stages"]):
            for j, p in enumerate(stage):
                stride = 2 if (i > 0 and j == 0) else 1
                h = jax.nn.relu(bn(conv(x, p["k1"], stride), p["g1"], p["b1"]))
                h = layout.constrain(h, (BATCH, None, None, TENSOR))
                h = bn(conv(h, p["k2"]), p["g2"], p["b2"])
                sc = conv(x, p["proj"], stride) if "proj" in p else x
                x = layout.constrain(jax.nn.relu(h + sc), (BATCH, None, None, TENSOR))
        return cross_entropy(x.mean((1, 2)) @ params["head"], y)

    return sgd_step(loss), (params, (images, labels))
