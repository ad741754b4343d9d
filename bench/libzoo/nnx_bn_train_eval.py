"""flax NNX's sharding guide with ``BatchNorm``: a train step and an eval in one ``nnx.jit``.

Kernels and BatchNorm scales annotated by ``nnx.with_partitioning``, the model's
state constrained in the step by ``nnx.get_partition_spec`` +
``jax.lax.with_sharding_constraint`` (the guide's pattern); a CNN with
``nnx.BatchNorm`` and ``nnx.Dropout`` trained in ``model.train()`` mode (batch
statistics, dropout) by an ``nnx.Optimizer``, then evaluated in ``model.eval()``
mode (running statistics) in the same call; images over ``data``, hidden
features over ``model`` of a 4x2 mesh.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import optax
from flax import nnx
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from bench.libzoo.nnx_jit import nnx_jit
from bench.models.program import Program, RandomArrays, check_size, make_mesh

NAME = "nnx_bn_train_eval"
SIZES = {
    "small": dict(batch=16, size=8, channels=3, width=8, hidden=32, classes=10),
    "large": dict(batch=128, size=32, channels=3, width=64, hidden=512, classes=100),
}


class CNN(nnx.Module):
    def __init__(self, d, rngs):
        init = nnx.initializers.lecun_normal()
        self.conv = nnx.Conv(d["channels"], d["width"], (3, 3), rngs=rngs)
        self.bn = nnx.BatchNorm(d["width"], rngs=rngs)
        self.fc1 = nnx.Linear(
            d["width"] * (d["size"] // 2) ** 2,
            d["hidden"],
            kernel_init=nnx.with_partitioning(init, (None, "model")),
            rngs=rngs,
        )
        self.bn2 = nnx.BatchNorm(
            d["hidden"],
            scale_init=nnx.with_partitioning(nnx.initializers.ones, ("model",)),
            bias_init=nnx.with_partitioning(nnx.initializers.zeros, ("model",)),
            rngs=rngs,
        )
        self.drop = nnx.Dropout(0.2, rngs=rngs)
        self.fc2 = nnx.Linear(
            d["hidden"],
            d["classes"],
            kernel_init=nnx.with_partitioning(init, ("model", None)),
            rngs=rngs,
        )

    def __call__(self, x):
        x = nnx.relu(self.bn(self.conv(x)))
        x = nnx.avg_pool(x, (2, 2), (2, 2))
        x = x.reshape(x.shape[0], -1)
        x = self.drop(nnx.relu(self.bn2(self.fc1(x))))
        return self.fc2(x)


def train_step(model, optimizer, images, labels):
    model.train()

    def loss_fn(model):
        logits = model(images)
        return optax.softmax_cross_entropy_with_integer_labels(logits, labels).mean()

    loss, grads = nnx.value_and_grad(loss_fn)(model)
    optimizer.update(model, grads)
    state = nnx.state(model)
    nnx.update(model, jax.lax.with_sharding_constraint(state, nnx.get_partition_spec(state)))
    model.eval()
    eval_logits = model(images)
    return loss, jnp.mean(jnp.argmax(eval_logits, -1) == labels)


def make(size="small"):
    check_size(size)
    d = SIZES[size]
    mesh = make_mesh((4, 2), ("data", "model"))
    with jax.set_mesh(mesh):
        model = CNN(d, nnx.Rngs(0, dropout=1))
        optimizer = nnx.Optimizer(model, optax.sgd(0.05, momentum=0.9), wrt=nnx.Param)
    for obj in (model, optimizer):
        state = nnx.state(obj)
        nnx.update(obj, jax.device_put(state, nnx.get_named_sharding(state, mesh)))
    rand = RandomArrays(seed=1206)
    sh = NamedSharding(mesh, P("data"))
    images = jax.device_put(rand.normal((d["batch"], d["size"], d["size"], d["channels"])), sh)
    labels = jax.device_put(rand.integers(d["classes"], (d["batch"],)), sh)

    def jit(jit_function, fun):
        return nnx_jit(jit_function, fun, donate_argnums=(0, 1))

    return Program(
        name=NAME,
        description="nnx BatchNorm train/eval + Dropout, get_partition_spec constraint, nnx.jit, 4x2",
        fun=train_step,
        args=(model, optimizer, images, labels),
        in_shardings=None,
        out_shardings=None,
        mesh=mesh,
        donate_argnums=(0, 1),
        jit=jit,
        mesh_context=True,
    )
