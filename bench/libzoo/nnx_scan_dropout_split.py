"""flax NNX blocks made by ``nnx.vmap`` and scanned with per-layer dropout, in NNX's functional style.

Blocks (LayerNorm, Linear kernels ``nnx.with_partitioning(..., (None,
'model'))`` / ``(('model', None))``, ``nnx.Dropout`` holding its own
``nnx.Rngs`` stream) are created by ``nnx.vmap`` under ``nnx.split_rngs`` and
run by ``nnx.scan`` over an ``nnx.remat``'d body (``transform_metadata``
keeping the partition names on the layer axis). The step is written as NNX's
guide writes a plain ``jax.jit`` one: ``nnx.split((model, optimizer))``
outside, ``nnx.merge`` inside, the state's shardings from
``nnx.get_named_sharding``, state donated; mesh 4x2 (data, model).
"""

from __future__ import annotations

import jax
import optax
from flax import nnx
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from bench.models.program import Program, RandomArrays, check_size, make_mesh

NAME = "nnx_scan_dropout_split"
SIZES = {
    "small": dict(batch=8, seq=8, d=32, mlp=64, layers=3, vocab=48),
    "large": dict(batch=32, seq=64, d=256, mlp=1024, layers=6, vocab=1024),
}


class Block(nnx.Module):
    def __init__(self, d, mlp, rngs):
        init = nnx.initializers.lecun_normal()
        self.norm = nnx.LayerNorm(d, rngs=rngs)
        self.up = nnx.Linear(
            d, mlp, kernel_init=nnx.with_partitioning(init, (None, "model")), rngs=rngs
        )
        self.down = nnx.Linear(
            mlp, d, kernel_init=nnx.with_partitioning(init, ("model", None)), rngs=rngs
        )
        self.drop = nnx.Dropout(0.1, rngs=rngs)

    def __call__(self, x):
        h = self.drop(nnx.gelu(self.up(self.norm(x))))
        return x + self.down(h)


class Model(nnx.Module):
    def __init__(self, d, rngs):
        self.embed = nnx.Embed(d["vocab"], d["d"], rngs=rngs)

        @nnx.split_rngs(splits=d["layers"])
        @nnx.vmap(in_axes=(0,), out_axes=0, transform_metadata={nnx.PARTITION_NAME: None})
        def create(rngs):
            return Block(d["d"], d["mlp"], rngs)

        self.blocks = create(rngs)
        self.head = nnx.Linear(d["d"], d["vocab"], rngs=rngs)
        self.layers = d["layers"]

    def __call__(self, tokens):
        x = self.embed(tokens)

        @nnx.scan(
            in_axes=(nnx.Carry, 0),
            out_axes=nnx.Carry,
            transform_metadata={nnx.PARTITION_NAME: None},
        )
        @nnx.remat
        def forward(x, block):
            return block(x)

        x = forward(x, self.blocks)
        return self.head(x)


def make(size="small"):
    check_size(size)
    d = SIZES[size]
    mesh = make_mesh((4, 2), ("data", "model"))
    with jax.set_mesh(mesh):
        model = Model(d, nnx.Rngs(params=0, dropout=1))
        optimizer = nnx.Optimizer(model, optax.adamw(3e-4), wrt=nnx.Param)
    graphdef, state = nnx.split((model, optimizer))
    state_sharding = nnx.get_named_sharding(state, mesh)
    state = jax.device_put(state, state_sharding)
    batch_sharding = NamedSharding(mesh, P("data"))
    tokens = jax.device_put(
        RandomArrays(seed=1101).integers(d["vocab"], (d["batch"], d["seq"] + 1)), batch_sharding
    )

    def train_step(state, tokens):
        model, optimizer = nnx.merge(graphdef, state)

        def loss_fn(model):
            logits = model(tokens[:, :-1])
            return optax.softmax_cross_entropy_with_integer_labels(logits, tokens[:, 1:]).mean()

        loss, grads = nnx.value_and_grad(loss_fn)(model)
        optimizer.update(model, grads)
        _, state = nnx.split((model, optimizer))
        return state, loss

    return Program(
        name=NAME,
        description="nnx vmap/scan/remat blocks with per-layer Dropout rngs, split/merge under jax.jit, 4x2",
        fun=train_step,
        args=(state, tokens),
        in_shardings=(state_sharding, batch_sharding),
        out_shardings=(state_sharding, NamedSharding(mesh, P())),
        mesh=mesh,
        donate_argnums=(0,),
    )
