"""flax NNX training with filters and ``nnx.remat``'d FSDP blocks.

An ``nnx.Sequential`` of ``nnx.Linear`` / ``nnx.relu`` per block behind an
``nnx.RMSNorm``, the blocks held in an ``nnx.List`` and each run under
``nnx.remat``; a frozen first layer left out of training by
``nnx.Optimizer(..., wrt=nnx.All(nnx.Param, nnx.Not(nnx.PathContains('frozen'))))``
and ``nnx.value_and_grad(argnums=nnx.DiffState(0, ...))``, then decayed through
``nnx.state(model, filter)`` + ``nnx.update``. Kernels annotated by
``nnx.with_partitioning`` over ``('fsdp', 'model')`` on a 4x2 mesh, ``nnx.jit``
donating the model and optimizer.
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

NAME = "nnx_seq_remat_filters"
SIZES = {
    "small": dict(batch=16, f=32, h=64, out=8, depth=3),
    "large": dict(batch=256, f=256, h=1024, out=64, depth=6),
}


class Block(nnx.Module):
    def __init__(self, f, h, rngs):
        init = nnx.initializers.lecun_normal()
        self.net = nnx.Sequential(
            nnx.Linear(f, h, kernel_init=nnx.with_partitioning(init, ("fsdp", "model")), rngs=rngs),
            nnx.relu,
            nnx.Linear(h, f, kernel_init=nnx.with_partitioning(init, ("model", "fsdp")), rngs=rngs),
        )
        self.norm = nnx.RMSNorm(f, rngs=rngs)

    def __call__(self, x):
        return x + self.net(self.norm(x))


class Net(nnx.Module):
    def __init__(self, d, rngs):
        self.frozen = nnx.Linear(d["f"], d["f"], rngs=rngs)
        self.blocks = nnx.List([Block(d["f"], d["h"], rngs) for _ in range(d["depth"])])
        self.head = nnx.Linear(
            d["f"],
            d["out"],
            kernel_init=nnx.with_partitioning(nnx.initializers.lecun_normal(), ("fsdp", None)),
            rngs=rngs,
        )

    def __call__(self, x):
        x = self.frozen(x)
        for b in self.blocks:
            x = nnx.remat(lambda blk, x: blk(x))(b, x)
        return self.head(x)


TRAINABLE = nnx.All(nnx.Param, nnx.Not(nnx.PathContains("frozen")))


def train_step(model, optimizer, x, y):
    diff = nnx.DiffState(0, TRAINABLE)
    loss, grads = nnx.value_and_grad(lambda m: jnp.mean((m(x) - y) ** 2), argnums=diff)(model)
    optimizer.update(model, grads)
    frozen = nnx.state(model, nnx.PathContains("frozen"))
    nnx.update(model, jax.tree.map(lambda a: a * 0.999, frozen))  # slow decay of the frozen layer
    return loss


def make(size="small"):
    check_size(size)
    d = SIZES[size]
    mesh = make_mesh((4, 2), ("fsdp", "model"))
    with jax.set_mesh(mesh):
        model = Net(d, nnx.Rngs(0))
        optimizer = nnx.Optimizer(model, optax.adamw(1e-3), wrt=TRAINABLE)
    for obj in (model, optimizer):
        st = nnx.state(obj)
        nnx.update(obj, jax.device_put(st, nnx.get_named_sharding(st, mesh)))
    rand = RandomArrays(seed=1308)
    bs = NamedSharding(mesh, P("fsdp"))
    x = jax.device_put(rand.normal((d["batch"], d["f"])), bs)
    y = jax.device_put(rand.normal((d["batch"], d["out"])), bs)
    return Program(
        name=NAME,
        description="nnx.Sequential + nnx.List + nnx.remat, filtered Optimizer/DiffState, nnx.state/update, 4x2",
        fun=train_step,
        args=(model, optimizer, x, y),
        in_shardings=None,
        out_shardings=None,
        mesh=mesh,
        donate_argnums=(0, 1),
        jit=lambda jf, fun: nnx_jit(jf, fun, donate_argnums=(0, 1)),
        mesh_context=True,
    )
