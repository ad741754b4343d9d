"""A flax NNX ResNet trained by ``nnx.jit`` on a batch split over both mesh axes.

``nnx.Conv`` + ``nnx.BatchNorm`` residual blocks (a strided stage with a 1x1
projection), global average pooling, ``nnx.Dropout`` before the ``nnx.Linear``
head; ``nnx.value_and_grad(has_aux=True)``, an ``nnx.Optimizer`` of
``optax.sgd`` with Nesterov momentum and an ``nnx.MultiMetric`` updated in place,
as NNX's CIFAR tutorials write the step. Pure data parallelism on a 2-D mesh: the
model, optimizer and metric state replicated, images split over
``("data", "replica")`` of a 4x2 mesh (every BatchNorm statistic a mean over both
axes). The user's ``nnx.jit`` is built on the route's jit (``nnx_jit``).
"""

from __future__ import annotations

import jax
import optax
from flax import nnx
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from bench.libzoo.nnx_jit import nnx_jit
from bench.models.program import Program, RandomArrays, check_size, make_mesh

NAME = "nnx_resnet_batchnorm"
SIZES = {
    "small": dict(batch=16, image=16, widths=(8, 16), classes=10),
    "large": dict(batch=128, image=32, widths=(32, 64, 128), classes=10),
}


class ResBlock(nnx.Module):
    def __init__(self, cin, cout, stride, rngs):
        self.conv1 = nnx.Conv(cin, cout, (3, 3), strides=stride, use_bias=False, rngs=rngs)
        self.bn1 = nnx.BatchNorm(cout, rngs=rngs)
        self.conv2 = nnx.Conv(cout, cout, (3, 3), use_bias=False, rngs=rngs)
        self.bn2 = nnx.BatchNorm(cout, rngs=rngs)
        projects = cin != cout or stride != 1
        self.proj = (nnx.Conv(cin, cout, (1, 1), strides=stride, use_bias=False, rngs=rngs)
                     if projects else None)  # fmt: skip

    def __call__(self, x):
        y = self.bn2(self.conv2(nnx.relu(self.bn1(self.conv1(x)))))
        return nnx.relu(y + (x if self.proj is None else self.proj(x)))


class ResNet(nnx.Module):
    def __init__(self, widths, classes, rngs):
        self.stem = nnx.Conv(3, widths[0], (3, 3), use_bias=False, rngs=rngs)
        self.bn = nnx.BatchNorm(widths[0], rngs=rngs)
        cins = (widths[0],) + tuple(widths[:-1])
        self.blocks = nnx.List([
            ResBlock(cin, width, 1 if i == 0 else 2, rngs)
            for i, (cin, width) in enumerate(zip(cins, widths))
        ])  # fmt: skip
        self.dropout = nnx.Dropout(0.2, rngs=rngs)
        self.head = nnx.Linear(widths[-1], classes, rngs=rngs)

    def __call__(self, x):
        x = nnx.relu(self.bn(self.stem(x)))
        for block in self.blocks:
            x = block(x)
        return self.head(self.dropout(x.mean(axis=(1, 2))))


def train_step(model, optimizer, metrics, images, labels):
    def loss_fn(model):
        logits = model(images)
        loss = optax.softmax_cross_entropy_with_integer_labels(logits, labels).mean()
        return loss, logits

    (loss, logits), grads = nnx.value_and_grad(loss_fn, has_aux=True)(model)
    metrics.update(loss=loss, logits=logits, labels=labels)
    optimizer.update(model, grads)
    return loss


def make(size: str = "small") -> Program:
    check_size(size)
    dims = SIZES[size]
    mesh = make_mesh((4, 2), ("data", "replica"))
    model = ResNet(dims["widths"], dims["classes"], nnx.Rngs(params=0, dropout=1))
    optimizer = nnx.Optimizer(model, optax.sgd(0.1, momentum=0.9, nesterov=True), wrt=nnx.Param)
    metrics = nnx.MultiMetric(accuracy=nnx.metrics.Accuracy(), loss=nnx.metrics.Average("loss"))
    replicated = NamedSharding(mesh, P())
    for obj in (model, optimizer, metrics):
        nnx.update(obj, jax.device_put(nnx.state(obj), replicated))
    rand = RandomArrays(seed=203)
    batch = NamedSharding(mesh, P(("data", "replica")))
    images = jax.device_put(rand.normal((dims["batch"], dims["image"], dims["image"], 3)), batch)
    labels = jax.device_put(rand.integers(dims["classes"], (dims["batch"],)), batch)

    def jit(jit_function, fun):
        return nnx_jit(jit_function, fun, donate_argnums=(0, 1, 2))

    return Program(
        name=NAME,
        description="nnx ResNet (Conv + BatchNorm blocks, Dropout), sgd Nesterov, MultiMetric, "
        "batch over ('data', 'replica') of 4x2",
        fun=train_step,
        args=(model, optimizer, metrics, images, labels),
        in_shardings=None,
        out_shardings=None,
        mesh=mesh,
        donate_argnums=(0, 1, 2),
        jit=jit,
    )
