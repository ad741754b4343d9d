"""A CNN train step in flax.linen with BatchNorm statistics and SGD with momentum.

Two ``nn.Conv`` + ``nn.BatchNorm`` + ReLU stages (the second strided), global
average pooling and a ``nn.Dense`` classifier. The step applies the model with
``mutable=["batch_stats"]`` (training mode: batch statistics, running averages
updated), takes the gradient of the softmax cross-entropy with ``has_aux``, and
updates with ``optax.sgd(momentum=0.9)``. Data parallel on a (data, model)
mesh of 4 x 2: images split over ``data``; the convolutions' output channels
split over ``model``. Returns the new parameters, batch statistics, optimizer
state and the loss.
"""

from __future__ import annotations

import flax.linen as nn
import jax
import optax
from jax.sharding import PartitionSpec as P

from bench.models.program import Program, RandomArrays, check_size, make_mesh, place, shardings

NAME = "cnn_batchnorm"
SIZES = {
    "small": dict(batch=16, image=8, channels=3, features=(8, 16), classes=10),
    "large": dict(batch=64, image=32, channels=3, features=(64, 128), classes=100),
}
LEARNING_RATE = 0.05


class ConvNet(nn.Module):
    features: tuple[int, ...]
    classes: int

    @nn.compact
    def __call__(self, images: jax.Array, train: bool) -> jax.Array:
        x = images
        for i, width in enumerate(self.features):
            x = nn.Conv(width, (3, 3), strides=(1 if i == 0 else 2), use_bias=False)(x)
            x = nn.BatchNorm(use_running_average=not train, momentum=0.9)(x)
            x = nn.relu(x)
        x = x.mean(axis=(1, 2))
        return nn.Dense(self.classes)(x)


def conv_specs(tree):
    """Output channels (a kernel's last dimension, a bias's / statistic's only one)
    over ``model``; the classifier replicated."""

    def spec(path, leaf):
        if "Dense" in jax.tree_util.keystr(path):
            return P()
        return P(*([None] * (leaf.ndim - 1)), "model")

    return jax.tree_util.tree_map_with_path(spec, tree)


def make_train_step(model: nn.Module, optimizer: optax.GradientTransformation):
    def train_step(params, batch_stats, opt_state, images, labels):
        def loss_fn(params):
            logits, updates = model.apply(
                {"params": params, "batch_stats": batch_stats}, images, train=True,
                mutable=["batch_stats"],
            )  # fmt: skip
            loss = optax.softmax_cross_entropy_with_integer_labels(logits, labels).mean()
            return loss, updates["batch_stats"]

        (loss, new_stats), grads = jax.value_and_grad(loss_fn, has_aux=True)(params)
        updates, opt_state = optimizer.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), new_stats, opt_state, loss

    return train_step


def make(size: str = "small") -> Program:
    check_size(size)
    dims = SIZES[size]
    mesh = make_mesh((4, 2), ("data", "model"))
    model = ConvNet(dims["features"], dims["classes"])
    optimizer = optax.sgd(LEARNING_RATE, momentum=0.9)
    rand = RandomArrays(seed=33)
    images = rand.normal((dims["batch"], dims["image"], dims["image"], dims["channels"]))
    labels = rand.integers(dims["classes"], (dims["batch"],))
    variables = jax.jit(model.init, static_argnames="train")(
        jax.random.key(2, impl="rbg"), images, train=False
    )
    params, batch_stats = variables["params"], variables["batch_stats"]
    opt_state = optimizer.init(params)
    param_specs, stat_specs = conv_specs(params), conv_specs(batch_stats)
    # The momentum trace follows the parameters; optax's other leaves are replicated.
    opt_specs = jax.tree.map(lambda leaf: P(), opt_state)
    opt_specs = (optax.TraceState(trace=param_specs), *opt_specs[1:])
    specs = (param_specs, stat_specs, opt_specs, P("data"), P("data"))
    in_shardings = shardings(mesh, specs)
    return Program(
        name=NAME,
        description="flax.linen Conv + BatchNorm (mutable batch_stats) train step, "
        "optax sgd momentum",
        fun=make_train_step(model, optimizer),
        args=place((params, batch_stats, opt_state, images, labels), in_shardings),
        in_shardings=in_shardings,
        out_shardings=shardings(mesh, (param_specs, stat_specs, opt_specs, P())),
        mesh=mesh,
    )
