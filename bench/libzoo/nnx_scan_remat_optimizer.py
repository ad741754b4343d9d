"""flax NNX blocks stacked by ``nnx.vmap`` and run by ``nnx.scan`` over ``nnx.remat``.

The blocks (``nnx.LayerNorm``, two ``nnx.Linear`` whose kernels are made by
``nnx.with_partitioning(init, ("fsdp", "model"))`` / ``(("model", "fsdp"))``)
are created by an ``nnx.vmap`` over ``nnx.split_rngs`` (the layer axis left
out of the sharding metadata with ``transform_metadata``) and applied by an
``nnx.scan`` over the layers, each step under ``nnx.remat``. The optimizer is
``nnx.Optimizer(model, chain(clip_by_global_norm, adamw(warmup_cosine_decay_schedule)),
wrt=nnx.Param)`` made under ``jax.set_mesh``; the step is the functional form
(``nnx.split`` of ``(model, optimizer)``, ``nnx.merge`` inside,
``nnx.value_and_grad``, ``optimizer.update``: ``flax_nnx_sharded``'s step), its state placed by
``nnx.get_named_sharding`` on a 2x2x2 mesh (``data``, ``fsdp``, ``model``) and
donated.
"""

from __future__ import annotations

import jax
import optax
from flax import nnx
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from bench.libzoo.flax_nnx_sharded import make_train_step
from bench.models.program import Program, RandomArrays, check_size, make_mesh

NAME = "nnx_scan_remat_optimizer"
SIZES = {
    "small": dict(batch=16, d=32, hidden=64, layers=3),
    "large": dict(batch=64, d=256, hidden=1024, layers=4),
}


class Block(nnx.Module):
    def __init__(self, d, hidden, rngs):
        init = nnx.initializers.lecun_normal()
        self.norm = nnx.LayerNorm(d, rngs=rngs)
        self.up = nnx.Linear(
            d,
            hidden,
            rngs=rngs,
            kernel_init=nnx.with_partitioning(init, ("fsdp", "model")),
            bias_init=nnx.with_partitioning(nnx.initializers.zeros_init(), ("model",)),
        )
        self.down = nnx.Linear(
            hidden, d, rngs=rngs, kernel_init=nnx.with_partitioning(init, ("model", "fsdp"))
        )

    def __call__(self, x):
        return x + self.down(jax.nn.gelu(self.up(self.norm(x))))


class Stack(nnx.Module):
    def __init__(self, d, hidden, layers, rngs):
        @nnx.split_rngs(splits=layers)
        @nnx.vmap(in_axes=(0,), out_axes=0, transform_metadata={nnx.PARTITION_NAME: None})
        def create(rngs):
            return Block(d, hidden, rngs)

        self.blocks = create(rngs)
        self.head = nnx.Linear(d, 1, rngs=rngs)

    def __call__(self, x):
        @nnx.scan(
            in_axes=(0, nnx.Carry),
            out_axes=nnx.Carry,
            transform_metadata={nnx.PARTITION_NAME: None},
        )
        @nnx.remat
        def body(block, x):
            return block(x)

        return self.head(body(self.blocks, x))[:, 0]


def make(size="small"):
    check_size(size)
    dims = SIZES[size]
    mesh = make_mesh((2, 2, 2), ("data", "fsdp", "model"))
    with jax.set_mesh(mesh):
        model = Stack(dims["d"], dims["hidden"], dims["layers"], nnx.Rngs(3))
        schedule = optax.warmup_cosine_decay_schedule(0.0, 1e-3, 2, 10)
        optimizer = nnx.Optimizer(
            model,
            optax.chain(optax.clip_by_global_norm(1.0), optax.adamw(schedule, weight_decay=0.1)),
            wrt=nnx.Param,
        )
    graphdef, state = nnx.split((model, optimizer))
    state_shardings = nnx.get_named_sharding(state, mesh)
    state = jax.device_put(state, state_shardings)
    batch = NamedSharding(mesh, P(("data", "fsdp")))
    rand = RandomArrays(seed=101)
    x = jax.device_put(rand.normal((dims["batch"], dims["d"])), batch)
    y = jax.device_put(rand.normal((dims["batch"],)), batch)
    return Program(
        name=NAME,
        description="nnx.vmap-built blocks, nnx.scan+nnx.remat, nnx.Optimizer clip+adamw(warmup_cosine)",
        fun=make_train_step(graphdef),
        args=(state, x, y),
        in_shardings=(state_shardings, batch, batch),
        out_shardings=(state_shardings, NamedSharding(mesh, P())),
        mesh=mesh,
        donate_argnums=(0,),
        mesh_context=True,
    )
