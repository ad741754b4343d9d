"""The decoder-only LM train step of ``lm_linen``, written in flax.nnx.

Parameters carry their mesh axes as ``nnx.Param`` sharding metadata
(``nnx.with_partitioning`` on every initializer): FSDP on ``data`` for the
model dimension, tensor parallel on ``model`` for heads, MLP units and
vocabulary; the output head is a separate (untied) ``nnx.Linear``. The step is
nnx's functional API: ``nnx.split`` the model and its ``nnx.Optimizer``
(``optax.adamw``) into a graph definition and one ``State`` pytree, and the
jitted step ``nnx.merge``s them, takes ``nnx.value_and_grad``, updates, and
returns the new ``State`` (donated in, same shardings out, from
``nnx.get_partition_spec``) and the loss. Activations are pinned with
``jax.lax.with_sharding_constraint`` on ``NamedSharding``s of the model's mesh.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import optax
from flax import nnx
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from bench.models.program import Program, RandomArrays, check_size, make_mesh, place, shardings

NAME = "lm_nnx"
SIZES = {
    "small": dict(batch=8, seq=16, vocab=64, d_model=32, heads=4, mlp=64, layers=2),
    "large": dict(batch=16, seq=128, vocab=1024, d_model=256, heads=8, mlp=1024, layers=4),
}
LEARNING_RATE = 1e-3
ACTIVATIONS = P("data", None, None)  # (batch, length, embed)


def linear(features_in: int, features_out: int, axes: tuple, rngs: nnx.Rngs,
           use_bias: bool = False) -> nnx.Linear:  # fmt: skip
    return nnx.Linear(
        features_in, features_out, use_bias=use_bias, rngs=rngs,
        kernel_init=nnx.with_partitioning(nnx.initializers.lecun_normal(), axes),
        bias_init=nnx.with_partitioning(nnx.initializers.zeros_init(), axes[1:]),
    )  # fmt: skip


def layer_norm(features: int, rngs: nnx.Rngs) -> nnx.LayerNorm:
    return nnx.LayerNorm(
        features, rngs=rngs,
        scale_init=nnx.with_partitioning(nnx.initializers.ones_init(), (None,)),
        bias_init=nnx.with_partitioning(nnx.initializers.zeros_init(), (None,)),
    )  # fmt: skip


class Attention(nnx.Module):
    def __init__(self, d_model: int, heads: int, mesh, *, rngs: nnx.Rngs):
        self.heads, self.mesh = heads, mesh
        self.query = linear(d_model, d_model, ("data", "model"), rngs)
        self.key = linear(d_model, d_model, ("data", "model"), rngs)
        self.value = linear(d_model, d_model, ("data", "model"), rngs)
        self.out = linear(d_model, d_model, ("model", "data"), rngs)

    def __call__(self, x: jax.Array) -> jax.Array:
        batch, seq, d_model = x.shape
        heads_spec = NamedSharding(self.mesh, P("data", None, "model", None))

        def split(t):
            return jax.lax.with_sharding_constraint(
                t.reshape(batch, seq, self.heads, d_model // self.heads), heads_spec
            )

        q, k, v = split(self.query(x)), split(self.key(x)), split(self.value(x))
        scores = jnp.einsum("bqhd,bkhd->bhqk", q, k) * (d_model // self.heads) ** -0.5
        causal = jnp.tril(jnp.ones((seq, seq), dtype=bool))
        probs = jax.nn.softmax(jnp.where(causal, scores, -1e9), axis=-1)
        mixed = jnp.einsum("bhqk,bkhd->bqhd", probs, v).reshape(batch, seq, d_model)
        return self.out(mixed)


class Block(nnx.Module):
    def __init__(self, d_model: int, heads: int, mlp: int, mesh, *, rngs: nnx.Rngs):
        self.mesh = mesh
        self.ln1 = layer_norm(d_model, rngs)
        self.attention = Attention(d_model, heads, mesh, rngs=rngs)
        self.ln2 = layer_norm(d_model, rngs)
        self.up = linear(d_model, mlp, ("data", "model"), rngs, use_bias=True)
        self.down = linear(mlp, d_model, ("model", "data"), rngs, use_bias=True)

    def __call__(self, x: jax.Array) -> jax.Array:
        x = x + self.attention(self.ln1(x))
        x = x + self.down(jax.nn.gelu(self.up(self.ln2(x))))
        return jax.lax.with_sharding_constraint(x, NamedSharding(self.mesh, ACTIVATIONS))


class LanguageModel(nnx.Module):
    def __init__(self, vocab: int, d_model: int, heads: int, mlp: int, layers: int, mesh,
                 *, rngs: nnx.Rngs):  # fmt: skip
        self.mesh = mesh
        self.embed = nnx.Embed(
            vocab, d_model, rngs=rngs,
            embedding_init=nnx.with_partitioning(nnx.initializers.normal(1.0), ("model", "data")),
        )  # fmt: skip
        self.blocks = nnx.List([Block(d_model, heads, mlp, mesh, rngs=rngs)
                                for _ in range(layers)])  # fmt: skip
        self.ln_final = layer_norm(d_model, rngs)
        self.head = linear(d_model, vocab, ("data", "model"), rngs)  # untied

    def __call__(self, tokens: jax.Array) -> jax.Array:
        x = jax.lax.with_sharding_constraint(
            self.embed(tokens), NamedSharding(self.mesh, ACTIVATIONS)
        )
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln_final(x))


def make_train_step(graphdef: nnx.GraphDef):
    """The jitted step of nnx's functional API: ``(state, tokens) -> (state, loss)``."""

    def train_step(state: nnx.State, tokens: jax.Array):
        model, optimizer = nnx.merge(graphdef, state)

        def loss_fn(model):
            logits = model(tokens[:, :-1])
            return optax.softmax_cross_entropy_with_integer_labels(logits, tokens[:, 1:]).mean()

        loss, grads = nnx.value_and_grad(loss_fn)(model)
        optimizer.update(model, grads)
        return nnx.state((model, optimizer)), loss

    return train_step


def make(size: str = "small") -> Program:
    check_size(size)
    dims = SIZES[size]
    mesh = make_mesh((4, 2), ("data", "model"))
    with jax.set_mesh(mesh):  # nnx shards each variable as it is created
        model = LanguageModel(dims["vocab"], dims["d_model"], dims["heads"], dims["mlp"],
                              dims["layers"], mesh,
                              rngs=nnx.Rngs(jax.random.key(0, impl="rbg")))  # fmt: skip
        optimizer = nnx.Optimizer(
            model, optax.adamw(LEARNING_RATE, weight_decay=0.01), wrt=nnx.Param
        )
    graphdef, state = nnx.split((model, optimizer))
    state_shardings = nnx.get_named_sharding(state, mesh)
    tokens = RandomArrays(seed=22).integers(dims["vocab"], (dims["batch"], dims["seq"] + 1))
    token_sharding = NamedSharding(mesh, P("data"))
    return Program(
        name=NAME,
        description=f"flax.nnx {dims['layers']}-block LM, nnx.with_partitioning, "
        "split/merge step, nnx.Optimizer adamw, donated state",
        fun=make_train_step(graphdef),
        args=(place(state, state_shardings), place(tokens, token_sharding)),
        in_shardings=(state_shardings, token_sharding),
        out_shardings=(state_shardings, shardings(mesh, P())),
        mesh=mesh,
        donate_argnums=(0,),
    )
