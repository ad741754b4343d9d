"""A flax NNX train step under ``nnx.jit`` over the modules themselves, as NNX's tutorials write it.

``nnx.jit(train_step, donate_argnums=(0, 1, 2))`` over ``(model, optimizer,
metrics)`` objects that the step updates in place: ``nnx.value_and_grad(...,
has_aux=True)``, ``optimizer.update(model, grads)`` of an ``nnx.Optimizer``
(``chain(clip_by_global_norm, adamw)``, ``wrt=nnx.Param``), and an
``nnx.MultiMetric`` (``Accuracy``, ``Average("loss")``) updated with the
logits. The model is ``nnx.Linear`` -> ``nnx.BatchNorm`` (its batch statistics
updated in place) -> ``nnx.Dropout`` (its key drawn from the model's
``nnx.Rngs``) -> ``nnx.Linear``, the kernels made by ``nnx.with_partitioning``
(tensor parallel over ``model``) and every module's state placed by
``nnx.get_named_sharding`` (created under ``jax.set_mesh``); the batch is split
over ``data`` (4x2 mesh). The user's ``nnx.jit`` is built on the route's jit
(``bench/libzoo/nnx_jit.py``).
"""

from __future__ import annotations

import jax
import optax
from flax import nnx
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from bench.libzoo.nnx_jit import nnx_jit
from bench.models.program import Program, RandomArrays, check_size, make_mesh

NAME = "nnx_jit_train"
SIZES = {
    "small": dict(batch=16, features=16, hidden=32, classes=4),
    "large": dict(batch=256, features=256, hidden=1024, classes=10),
}


class MLP(nnx.Module):
    def __init__(self, features, hidden, classes, rngs):
        init = nnx.initializers.lecun_normal()
        self.fc1 = nnx.Linear(
            features,
            hidden,
            rngs=rngs,
            kernel_init=nnx.with_partitioning(init, (None, "model")),
            bias_init=nnx.with_partitioning(nnx.initializers.zeros_init(), ("model",)),
        )
        self.bn = nnx.BatchNorm(hidden, rngs=rngs)
        self.dropout = nnx.Dropout(0.1, rngs=rngs)
        self.fc2 = nnx.Linear(
            hidden, classes, rngs=rngs, kernel_init=nnx.with_partitioning(init, ("model", None))
        )

    def __call__(self, x):
        return self.fc2(self.dropout(nnx.relu(self.bn(self.fc1(x)))))


def loss_fn(model, x, labels):
    logits = model(x)
    return optax.softmax_cross_entropy_with_integer_labels(logits, labels).mean(), logits


def train_step(model, optimizer, metrics, x, labels):
    grad_fn = nnx.value_and_grad(loss_fn, has_aux=True)
    (loss, logits), grads = grad_fn(model, x, labels)
    metrics.update(loss=loss, logits=logits, labels=labels)
    optimizer.update(model, grads)
    return loss


def make(size="small"):
    check_size(size)
    dims = SIZES[size]
    mesh = make_mesh((4, 2), ("data", "model"))
    with jax.set_mesh(mesh):
        model = MLP(
            dims["features"], dims["hidden"], dims["classes"], nnx.Rngs(params=0, dropout=1)
        )
        optimizer = nnx.Optimizer(
            model, optax.chain(optax.clip_by_global_norm(1.0), optax.adamw(1e-3)), wrt=nnx.Param
        )
        metrics = nnx.MultiMetric(accuracy=nnx.metrics.Accuracy(), loss=nnx.metrics.Average("loss"))
    for obj in (model, optimizer):
        state = nnx.state(obj)
        nnx.update(obj, jax.device_put(state, nnx.get_named_sharding(state, mesh)))
    replicated = NamedSharding(mesh, P())
    mstate = nnx.state(metrics)
    nnx.update(metrics, jax.device_put(mstate, jax.tree.map(lambda _: replicated, mstate)))
    batch = NamedSharding(mesh, P("data"))
    rand = RandomArrays(seed=115)
    x = jax.device_put(rand.normal((dims["batch"], dims["features"])), batch)
    labels = jax.device_put(rand.integers(dims["classes"], (dims["batch"],)), batch)

    def jit(jit_function, fun):
        return nnx_jit(jit_function, fun, donate_argnums=(0, 1, 2))

    return Program(
        name=NAME,
        description="nnx.jit over (model, optimizer, metrics) objects, BatchNorm+Dropout, MultiMetric, clip+adamw",
        fun=train_step,
        args=(model, optimizer, metrics, x, labels),
        in_shardings=None,
        out_shardings=None,
        mesh=mesh,
        donate_argnums=(0, 1, 2),
        jit=jit,
    )
