"""An equinox CNN with stateful ``eqx.nn.BatchNorm``, trained as equinox's BatchNorm example.

The model is built with ``eqx.nn.make_with_state``: ``Conv2d`` layers, a
``BatchNorm(axis_name="batch")`` whose running statistics live in an
``eqx.nn.State``, ``Dropout`` and a ``Linear`` head. The loss ``jax.vmap``-s
the model over the batch with ``axis_name="batch"`` (``in_axes=(None, 0,
None, 0)``, ``out_axes=(0, None)``: one state for the whole batch) and returns
the new state as aux of ``eqx.filter_value_and_grad(..., has_aux=True)``. The
step is ``eqx.filter_jit``-ed; the batch is split over ``data`` (8 devices)
with ``eqx.filter_shard``, the model and state replicated, so the batch
statistics are all-reduced across the mesh.
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

NAME = "eqx_batchnorm_state"
SIZES = {
    "small": dict(batch=16, channels=3, size=8, width=8, classes=10),
    "large": dict(batch=256, channels=3, size=32, width=64, classes=100),
}


class ConvNet(eqx.Module):
    conv1: eqx.nn.Conv2d
    norm: eqx.nn.BatchNorm
    conv2: eqx.nn.Conv2d
    dropout: eqx.nn.Dropout
    head: eqx.nn.Linear

    def __init__(self, channels: int, width: int, size: int, classes: int, key: jax.Array):
        key1, key2, key3 = jax.random.split(key, 3)
        self.conv1 = eqx.nn.Conv2d(channels, width, kernel_size=3, padding=1, key=key1)
        self.norm = eqx.nn.BatchNorm(width, axis_name="batch", mode="ema")
        self.conv2 = eqx.nn.Conv2d(width, width, kernel_size=3, padding=1, key=key2)
        self.dropout = eqx.nn.Dropout(0.1)
        self.head = eqx.nn.Linear(width * size * size, classes, key=key3)

    def __call__(self, x, state, key):
        x = self.conv1(x)
        x, state = self.norm(x, state)
        x = jax.nn.relu(self.conv2(jax.nn.relu(x)))
        x = self.dropout(jnp.ravel(x), key=key)
        return self.head(x), state


def make_train_step(optimizer, batch_sharding, replicated):
    def loss_fn(model, state, images, labels, keys):
        batched = jax.vmap(model, axis_name="batch", in_axes=(0, None, 0), out_axes=(0, None))
        logits, state = batched(images, state, keys)
        loss = optax.softmax_cross_entropy_with_integer_labels(logits, labels).mean()
        return loss, state

    def train_step(model, state, opt_state, images, labels, key):
        images, labels = eqx.filter_shard((images, labels), batch_sharding)
        model, state = eqx.filter_shard((model, state), replicated)
        keys = jax.random.split(key, images.shape[0])
        (loss, state), grads = eqx.filter_value_and_grad(loss_fn, has_aux=True)(
            model, state, images, labels, keys)
        updates, opt_state = optimizer.update(grads, opt_state, eqx.filter(model, eqx.is_array))
        model = eqx.apply_updates(model, updates)
        return model, state, opt_state, loss

    return train_step


def make(size: str = "small") -> Program:
    check_size(size)
    dims = SIZES[size]
    mesh = make_mesh((8,), ("data",))
    model, state = eqx.nn.make_with_state(ConvNet)(
        dims["channels"], dims["width"], dims["size"], dims["classes"], jax.random.key(0))
    optimizer = optax.adam(1e-3)
    opt_state = optimizer.init(eqx.filter(model, eqx.is_array))
    batch_sharding = NamedSharding(mesh, P("data"))
    replicated = NamedSharding(mesh, P())
    rand = RandomArrays(seed=59)
    images = rand.normal((dims["batch"], dims["channels"], dims["size"], dims["size"]))
    labels = rand.integers(dims["classes"], (dims["batch"],))
    args = (eqx.filter_shard(model, replicated), eqx.filter_shard(state, replicated),
            eqx.filter_shard(opt_state, replicated), jax.device_put(images, batch_sharding),
            jax.device_put(labels, batch_sharding), jax.random.key(1))  # fmt: skip
    return Program(
        name=NAME,
        description="equinox ConvNet with stateful BatchNorm (make_with_state, eqx.nn.State) "
        "and Dropout, vmap axis_name='batch', filter_value_and_grad(has_aux), filter_jit",
        fun=make_train_step(optimizer, batch_sharding, replicated),
        args=args,
        in_shardings=(replicated, replicated, replicated, batch_sharding, batch_sharding,
                      replicated),
        out_shardings=None,
        mesh=mesh,
        jit=filter_jit,
    )
