"""Conv net train step: two convolutions, pooling, a dense head, cross-entropy, SGD.

On a (data, model) mesh: images are split over ``data``; the first
convolution's output channels and the second's input channels over ``model``
(the convolution analogue of the Megatron MLP), the head is replicated.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax
from jax.sharding import PartitionSpec as P

from bench.models.program import Program, RandomArrays, check_size, make_mesh, place, shardings

NAME = "conv_net"
SIZES = {
    "small": dict(batch=16, image=16, channels=(3, 16, 16), classes=10),
    "large": dict(batch=64, image=64, channels=(3, 64, 64), classes=100),
}
LEARNING_RATE = 0.1
PARAM_SPECS = {
    "conv1": P(None, None, None, "model"),  # HWIO: output channels on `model`
    "conv2": P(None, None, "model", None),  # input channels on `model`: partial sums
    "dense": P(),
}


def conv(x: jax.Array, kernel: jax.Array) -> jax.Array:
    return lax.conv_general_dilated(
        x, kernel, window_strides=(1, 1), padding="SAME",
        dimension_numbers=("NHWC", "HWIO", "NHWC"),
    )  # fmt: skip


def loss(params: dict, images: jax.Array, labels: jax.Array) -> jax.Array:
    x = jax.nn.relu(conv(images, params["conv1"]))
    x = jax.nn.relu(conv(x, params["conv2"]))
    pooled = x.mean(axis=(1, 2))
    logits = pooled @ params["dense"]
    log_probs = jax.nn.log_softmax(logits)
    return -jnp.take_along_axis(log_probs, labels[:, None], axis=1).mean()


def train_step(params: dict, images: jax.Array, labels: jax.Array):
    value, grads = jax.value_and_grad(loss)(params, images, labels)
    return value, jax.tree.map(lambda p, g: p - LEARNING_RATE * g, params, grads)


def make(size: str = "small") -> Program:
    check_size(size)
    dims = SIZES[size]
    mesh = make_mesh((4, 2), ("data", "model"))
    rand = RandomArrays(seed=5)
    c_in, c_mid, c_out = dims["channels"]
    params = {
        "conv1": rand.weight((3, 3, c_in, c_mid)),
        "conv2": rand.weight((3, 3, c_mid, c_out)),
        "dense": rand.weight((c_out, dims["classes"])),
    }
    images = rand.normal((dims["batch"], dims["image"], dims["image"], c_in))
    labels = rand.integers(dims["classes"], (dims["batch"],))
    in_shardings = shardings(mesh, (PARAM_SPECS, P("data"), P("data")))
    return Program(
        name=NAME,
        description="conv-conv-pool-dense train step; channels on `model`, images on `data`",
        fun=train_step,
        args=place((params, images, labels), in_shardings),
        in_shardings=in_shardings,
        out_shardings=shardings(mesh, (P(), PARAM_SPECS)),
        mesh=mesh,
    )
