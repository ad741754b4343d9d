"""An equinox U-Net trained with its decoder head frozen, as equinox's docs freeze parameters.

The model is ``eqx.nn`` layers only: a ``Sequential`` of ``Conv2d``,
``GroupNorm`` and a ``Lambda``-wrapped ``jax.nn.gelu``; ``MaxPool2d`` and a
middle ``Conv2d`` with ``Dropout``; a ``ConvTranspose2d`` back up, a skip
concatenation, then a head ``Sequential`` with ``PReLU`` (inside a ``Lambda``),
``AvgPool2d`` and a 1x1 ``Conv2d``. The head is frozen the way equinox's
"freezing parameters" example does it: a filter spec of ``eqx.is_array`` per
leaf whose head subtree ``eqx.tree_at`` replaces by ``False``, then
``eqx.partition`` / ``eqx.combine`` around ``eqx.filter_grad(has_aux=True)``;
``optax.sgd`` with momentum updates the trainable part. The batch is split
over ``data``, conv kernels with an even number of output channels over
``model``; the step is ``eqx.filter_jit``-ed.
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import optax
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from bench.libzoo.equinox_jit import filter_jit
from bench.models.program import Program, RandomArrays, check_size, make_mesh

NAME = "eqx_unet_frozen"
SIZES = {
    "small": dict(batch=8, channels=3, size=8, width=8),
    "large": dict(batch=64, channels=3, size=64, width=64),
}


class UNet(eqx.Module):
    down: eqx.nn.Sequential
    pool: eqx.nn.MaxPool2d
    mid: eqx.nn.Conv2d
    drop: eqx.nn.Dropout
    up: eqx.nn.ConvTranspose2d
    head: eqx.nn.Sequential

    def __init__(self, channels: int, width: int, key: jax.Array):
        keys = jax.random.split(key, 5)
        self.down = eqx.nn.Sequential([
            eqx.nn.Conv2d(channels, width, 3, padding=1, key=keys[0]),
            eqx.nn.GroupNorm(2, width),
            eqx.nn.Lambda(jax.nn.gelu),
        ])  # fmt: skip
        self.pool = eqx.nn.MaxPool2d(2, 2)
        self.mid = eqx.nn.Conv2d(width, width, 3, padding="SAME", key=keys[1])
        self.drop = eqx.nn.Dropout(0.2)
        self.up = eqx.nn.ConvTranspose2d(width, width, 2, stride=2, key=keys[2])
        self.head = eqx.nn.Sequential([
            eqx.nn.Conv2d(2 * width, width, 3, padding=1, key=keys[3]),
            eqx.nn.Lambda(eqx.nn.PReLU()),
            eqx.nn.AvgPool2d(3, 1, padding=1),
            eqx.nn.Conv2d(width, channels, 1, key=keys[4]),
        ])  # fmt: skip

    def __call__(self, x, *, key=None):
        skip = self.down(x)
        middle = self.drop(jax.nn.relu(self.mid(self.pool(skip))), key=key)
        return self.head(jnp.concatenate([skip, self.up(middle)], axis=0))


def frozen_head(model: UNet):
    """A filter spec: every array trainable but the head's."""
    spec = jax.tree.map(eqx.is_array, model)
    return eqx.tree_at(lambda m: m.head, spec, replace=jax.tree.map(lambda _: False, model.head))


def make_train_step(optimizer, filter_spec):
    def loss_fn(trainable, frozen, images, key):
        model = eqx.combine(trainable, frozen)
        keys = jax.random.split(key, images.shape[0])
        restored = eqx.filter_vmap(lambda x, k: model(x, key=k))(images, keys)
        return jnp.mean((restored - images) ** 2), jnp.mean(restored, axis=0)

    def train_step(model, opt_state, images, key):
        trainable, frozen = eqx.partition(model, filter_spec)
        grads, mean_image = eqx.filter_grad(loss_fn, has_aux=True)(trainable, frozen, images, key)
        updates, opt_state = optimizer.update(grads, opt_state, trainable)
        return eqx.apply_updates(model, updates), opt_state, mean_image

    return train_step


def make(size: str = "small") -> Program:
    check_size(size)
    dims = SIZES[size]
    mesh = make_mesh((4, 2), ("data", "model"))
    replicated = NamedSharding(mesh, P())

    def sharding_of(leaf):
        if eqx.is_array(leaf) and leaf.ndim == 4 and leaf.shape[0] % 2 == 0:
            return NamedSharding(mesh, P("model"))
        return replicated

    model = UNet(dims["channels"], dims["width"], jax.random.key(0))
    model_shardings = jax.tree.map(sharding_of, eqx.filter(model, eqx.is_array))
    model = eqx.filter_shard(model, model_shardings)
    filter_spec = frozen_head(model)
    optimizer = optax.sgd(1e-2, momentum=0.9)
    opt_state = optimizer.init(eqx.partition(model, filter_spec)[0])
    batch_sharding = NamedSharding(mesh, P("data"))
    images = RandomArrays(seed=67).normal(
        (dims["batch"], dims["channels"], dims["size"], dims["size"]))
    return Program(
        name=NAME,
        description="equinox U-Net (Conv2d, GroupNorm, MaxPool2d, ConvTranspose2d, AvgPool2d, "
        "Sequential/Lambda) with its head frozen by tree_at + partition, filter_grad(has_aux)",
        fun=make_train_step(optimizer, filter_spec),
        args=(model, jax.device_put(opt_state, replicated),
              jax.device_put(images, batch_sharding), jax.random.key(1)),
        in_shardings=(model_shardings, replicated, batch_sharding, replicated),
        out_shardings=None,
        mesh=mesh,
        jit=filter_jit,
    )
