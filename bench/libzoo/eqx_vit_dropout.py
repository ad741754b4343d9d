"""An equinox ViT trained under ``eqx.filter_jit``, as equinox's ViT example writes one.

An ``eqx.nn.Conv2d`` patch embedding, a class token and learned positions, blocks
of ``eqx.nn.LayerNorm`` + ``eqx.nn.MultiheadAttention`` + a ``Linear`` pair with
``eqx.nn.Dropout`` (keys split per example and per block), the class token's
head; ``eqx.filter_value_and_grad`` and ``optax.adamw`` (its update given the
arrays of the model). The images are split over ``data``; the model and the
optimizer state are placed by ``eqx.filter_shard`` with a sharding per leaf
(``jax.tree.map``): its 2-D weights with at least 16 rows, a multiple of the
``model`` axis, split over ``model`` by rows, the rest replicated (4x2 mesh). The user's ``filter_jit`` is built on
the route's jit (``equinox_jit``).
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

NAME = "eqx_vit_dropout"
SIZES = {
    "small": dict(batch=8, image=16, patch=4, d=32, heads=4, mlp=64, layers=2, classes=10),
    "large": dict(batch=64, image=32, patch=4, d=256, heads=8, mlp=1024, layers=6, classes=10),
}


class Block(eqx.Module):
    norm1: eqx.nn.LayerNorm
    attention: eqx.nn.MultiheadAttention
    norm2: eqx.nn.LayerNorm
    fc1: eqx.nn.Linear
    fc2: eqx.nn.Linear
    dropout: eqx.nn.Dropout

    def __init__(self, d, heads, mlp, key):
        k1, k2, k3 = jax.random.split(key, 3)
        self.norm1 = eqx.nn.LayerNorm(d)
        self.attention = eqx.nn.MultiheadAttention(heads, d, key=k1)
        self.norm2 = eqx.nn.LayerNorm(d)
        self.fc1 = eqx.nn.Linear(d, mlp, key=k2)
        self.fc2 = eqx.nn.Linear(mlp, d, key=k3)
        self.dropout = eqx.nn.Dropout(0.1)

    def __call__(self, x, key):
        k1, k2 = jax.random.split(key)
        y = jax.vmap(self.norm1)(x)
        x = x + self.dropout(self.attention(y, y, y), key=k1)
        y = jax.vmap(self.fc2)(jax.nn.gelu(jax.vmap(self.fc1)(jax.vmap(self.norm2)(x))))
        return x + self.dropout(y, key=k2)


class ViT(eqx.Module):
    patch: eqx.nn.Conv2d
    cls: jax.Array
    positions: jax.Array
    blocks: list
    norm: eqx.nn.LayerNorm
    head: eqx.nn.Linear

    def __init__(self, dims, key):
        keys = jax.random.split(key, dims["layers"] + 4)
        tokens = (dims["image"] // dims["patch"]) ** 2
        d = dims["d"]
        self.patch = eqx.nn.Conv2d(3, d, dims["patch"], stride=dims["patch"], key=keys[0])
        self.cls = jax.random.normal(keys[1], (1, d)) * 0.02
        self.positions = jax.random.normal(keys[2], (tokens + 1, d)) * 0.02
        self.blocks = [Block(d, dims["heads"], dims["mlp"], k) for k in keys[4:]]
        self.norm = eqx.nn.LayerNorm(d)
        self.head = eqx.nn.Linear(d, dims["classes"], key=keys[3])

    def __call__(self, image, key):
        x = self.patch(image)
        x = jnp.concatenate([self.cls, x.reshape(x.shape[0], -1).T]) + self.positions
        for block, k in zip(self.blocks, jax.random.split(key, len(self.blocks))):
            x = block(x, k)
        return self.head(self.norm(x[0]))


def make(size: str = "small") -> Program:
    check_size(size)
    dims = SIZES[size]
    mesh = make_mesh((4, 2), ("data", "model"))
    model = ViT(dims, jax.random.key(5))
    optimizer = optax.adamw(1e-3, weight_decay=0.05)

    def sharding_of(leaf):
        rows = (eqx.is_array(leaf) and leaf.ndim == 2 and leaf.shape[0] >= 16
                and leaf.shape[0] % mesh.shape["model"] == 0)  # fmt: skip
        return NamedSharding(mesh, P("model", None) if rows else P())

    model = eqx.filter_shard(model, jax.tree.map(sharding_of, model))
    opt_state = optimizer.init(eqx.filter(model, eqx.is_inexact_array))
    opt_state = eqx.filter_shard(opt_state, jax.tree.map(sharding_of, opt_state))
    rand = RandomArrays(seed=205)
    batch = NamedSharding(mesh, P("data"))
    images = rand.normal((dims["batch"], 3, dims["image"], dims["image"]))
    images = jax.device_put(images, batch)
    labels = jax.device_put(rand.integers(dims["classes"], (dims["batch"],)), batch)
    key = jax.device_put(jax.random.key(9), NamedSharding(mesh, P()))

    def make_step(model, opt_state, images, labels, key):
        @eqx.filter_value_and_grad
        def loss_fn(model):
            logits = jax.vmap(model)(images, jax.random.split(key, images.shape[0]))
            return optax.softmax_cross_entropy_with_integer_labels(logits, labels).mean()

        loss, grads = loss_fn(model)
        params = eqx.filter(model, eqx.is_inexact_array)
        updates, opt_state = optimizer.update(grads, opt_state, params)
        return loss, eqx.apply_updates(model, updates), opt_state

    def jit(jit_function, fun):
        return filter_jit(jit_function, fun, donate="all-except-first")

    return Program(
        name=NAME,
        description="equinox ViT: Conv2d patches, MultiheadAttention, Dropout, "
        "filter_value_and_grad, adamw; rows of 2-D weights on model (4x2)",
        fun=make_step,
        args=(model, opt_state, images, labels, key),
        in_shardings=None,
        out_shardings=None,
        mesh=mesh,
        donate_argnums=(1, 2, 3, 4),
        jit=jit,
    )
