"""flax NNX LoRA fine-tuning: only the adapters train, the frozen base is tensor parallel.

A token model of ``nnx.Embed`` (tied to the logits by ``attend``) and residual
feed-forward blocks of ``nnx.RMSNorm`` and two ``nnx.LoRALinear`` layers whose
base kernels are made by ``nnx.with_partitioning`` (split over ``model``); the
``nnx.Optimizer`` (``optax.adam``) holds state for ``wrt=nnx.LoRAParam`` only and
the gradient is taken through ``nnx.DiffState(0, nnx.LoRAParam)``, as NNX's LoRA
guide fine-tunes. Every state is placed by ``nnx.get_named_sharding`` (created
under ``jax.set_mesh``); tokens split over ``data`` of a 4x2 mesh.
"""

from __future__ import annotations

import jax
import optax
from flax import nnx
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from bench.libzoo.nnx_jit import nnx_jit
from bench.models.program import Program, RandomArrays, check_size, make_mesh

NAME = "nnx_lora_finetune"
SIZES = {
    "small": dict(batch=8, seq=8, vocab=64, d=32, hidden=128, rank=4, layers=2),
    "large": dict(batch=64, seq=64, vocab=1024, d=256, hidden=1024, rank=16, layers=4),
}


class FeedForward(nnx.Module):
    def __init__(self, d, hidden, rank, rngs):
        init = nnx.initializers.lecun_normal()
        self.norm = nnx.RMSNorm(d, rngs=rngs)
        self.up = nnx.LoRALinear(
            d, hidden, lora_rank=rank, rngs=rngs,
            kernel_init=nnx.with_partitioning(init, (None, "model")),
        )  # fmt: skip
        self.down = nnx.LoRALinear(
            hidden, d, lora_rank=rank, rngs=rngs,
            kernel_init=nnx.with_partitioning(init, ("model", None)),
        )  # fmt: skip

    def __call__(self, x):
        return x + self.down(nnx.silu(self.up(self.norm(x))))


class Model(nnx.Module):
    def __init__(self, dims, rngs):
        self.embed = nnx.Embed(dims["vocab"], dims["d"], rngs=rngs)
        self.layers = nnx.List([
            FeedForward(dims["d"], dims["hidden"], dims["rank"], rngs)
            for _ in range(dims["layers"])
        ])  # fmt: skip

    def __call__(self, tokens):
        x = self.embed(tokens)
        for layer in self.layers:
            x = layer(x)
        return self.embed.attend(x)


def train_step(model, optimizer, tokens):
    def loss_fn(model):
        logits = model(tokens[:, :-1])
        return optax.softmax_cross_entropy_with_integer_labels(logits, tokens[:, 1:]).mean()

    loss, grads = nnx.value_and_grad(loss_fn, argnums=nnx.DiffState(0, nnx.LoRAParam))(model)
    optimizer.update(model, grads)
    return loss


def make(size: str = "small") -> Program:
    check_size(size)
    dims = SIZES[size]
    mesh = make_mesh((4, 2), ("data", "model"))
    with jax.set_mesh(mesh):
        model = Model(dims, nnx.Rngs(0))
        optimizer = nnx.Optimizer(model, optax.adam(1e-3), wrt=nnx.LoRAParam)
    for obj in (model, optimizer):
        state = nnx.state(obj)
        nnx.update(obj, jax.device_put(state, nnx.get_named_sharding(state, mesh)))
    tokens = RandomArrays(seed=204).integers(dims["vocab"], (dims["batch"], dims["seq"] + 1))
    tokens = jax.device_put(tokens, NamedSharding(mesh, P("data")))

    def jit(jit_function, fun):
        return nnx_jit(jit_function, fun, donate_argnums=(0, 1))

    return Program(
        name=NAME,
        description="nnx LoRALinear fine-tuning: base kernels TP on model, Optimizer "
        "wrt=LoRAParam, DiffState gradient",
        fun=train_step,
        args=(model, optimizer, tokens),
        in_shardings=None,
        out_shardings=None,
        mesh=mesh,
        donate_argnums=(0, 1),
        jit=jit,
    )
