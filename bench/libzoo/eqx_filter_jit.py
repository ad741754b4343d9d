"""An equinox decoder LM trained the way equinox's parallelism example trains one.

An ``eqx.Module`` of ``eqx.nn`` layers (``Embedding``, ``LayerNorm``,
``MultiheadAttention`` with a causal mask, ``MLP``, ``Linear``), each applied to
one sequence and ``jax.vmap``-ed over the batch. The step is
``eqx.filter_jit``-ed: the model and the ``optax.adamw`` state go in whole (their
arrays traced, the rest static), are pinned with ``eqx.filter_shard`` (every
matrix split over ``model`` along its first dimension, the rest replicated;
tokens over ``data``), differentiated with ``eqx.filter_value_and_grad`` and
updated with ``eqx.apply_updates``. The harness lowers and compiles it through
equinox's own stages (``filter_jit(...).lower(...).compile()``).
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

NAME = "eqx_filter_jit"
SIZES = {
    "small": dict(batch=8, seq=16, vocab=64, d_model=32, heads=4, mlp=64, layers=2),
    "large": dict(batch=16, seq=128, vocab=1024, d_model=256, heads=8, mlp=1024, layers=4),
}
LEARNING_RATE = 1e-3


class Block(eqx.Module):
    norm1: eqx.nn.LayerNorm
    attention: eqx.nn.MultiheadAttention
    norm2: eqx.nn.LayerNorm
    mlp: eqx.nn.MLP

    def __init__(self, d_model: int, heads: int, mlp: int, *, key: jax.Array):
        attention_key, mlp_key = jax.random.split(key)
        self.norm1 = eqx.nn.LayerNorm(d_model)
        self.attention = eqx.nn.MultiheadAttention(heads, d_model, key=attention_key)
        self.norm2 = eqx.nn.LayerNorm(d_model)
        self.mlp = eqx.nn.MLP(d_model, d_model, mlp, depth=1, activation=jax.nn.gelu,
                              key=mlp_key)  # fmt: skip

    def __call__(self, x: jax.Array) -> jax.Array:  # (seq, d_model)
        causal = jnp.tril(jnp.ones((x.shape[0], x.shape[0]), dtype=bool))
        y = jax.vmap(self.norm1)(x)
        x = x + self.attention(y, y, y, mask=causal)
        return x + jax.vmap(self.mlp)(jax.vmap(self.norm2)(x))


class LanguageModel(eqx.Module):
    embed: eqx.nn.Embedding
    blocks: list[Block]
    norm: eqx.nn.LayerNorm
    head: eqx.nn.Linear

    def __init__(self, vocab: int, d_model: int, heads: int, mlp: int, layers: int,
                 *, key: jax.Array):  # fmt: skip
        embed_key, head_key, *block_keys = jax.random.split(key, layers + 2)
        self.embed = eqx.nn.Embedding(vocab, d_model, key=embed_key)
        self.blocks = [Block(d_model, heads, mlp, key=k) for k in block_keys]
        self.norm = eqx.nn.LayerNorm(d_model)
        self.head = eqx.nn.Linear(d_model, vocab, use_bias=False, key=head_key)

    def __call__(self, tokens: jax.Array) -> jax.Array:  # (seq,) -> (seq, vocab)
        x = jax.vmap(self.embed)(tokens)
        for block in self.blocks:
            x = block(x)
        return jax.vmap(self.head)(jax.vmap(self.norm)(x))


def shardings_of(tree, mesh):
    """Every matrix split over ``model`` along its first dimension, the rest replicated
    (non-array leaves stay as they are: ``eqx.filter_shard`` leaves them alone)."""
    def sharding(leaf):
        return NamedSharding(mesh, P("model") if jnp.ndim(leaf) == 2 else P())

    return jax.tree.map(sharding, eqx.filter(tree, eqx.is_array))


def make_train_step(optimizer, model_shardings, opt_shardings, token_sharding):
    def loss_fn(model, tokens):
        logits = jax.vmap(model)(tokens[:, :-1])
        return optax.softmax_cross_entropy_with_integer_labels(logits, tokens[:, 1:]).mean()

    def train_step(model, opt_state, tokens):
        model, opt_state = eqx.filter_shard((model, opt_state), (model_shardings, opt_shardings))
        tokens = eqx.filter_shard(tokens, token_sharding)
        loss, grads = eqx.filter_value_and_grad(loss_fn)(model, tokens)
        updates, opt_state = optimizer.update(grads, opt_state, eqx.filter(model, eqx.is_array))
        model = eqx.apply_updates(model, updates)
        model, opt_state = eqx.filter_shard((model, opt_state), (model_shardings, opt_shardings))
        return model, opt_state, loss

    return train_step


def make(size: str = "small") -> Program:
    check_size(size)
    dims = SIZES[size]
    mesh = make_mesh((4, 2), ("data", "model"))
    model = LanguageModel(dims["vocab"], dims["d_model"], dims["heads"], dims["mlp"],
                          dims["layers"], key=jax.random.key(0))  # fmt: skip
    optimizer = optax.adamw(LEARNING_RATE, weight_decay=0.01)
    opt_state = optimizer.init(eqx.filter(model, eqx.is_array))
    model_shardings, opt_shardings = shardings_of(model, mesh), shardings_of(opt_state, mesh)
    token_sharding = NamedSharding(mesh, P("data"))
    tokens = RandomArrays(seed=41).integers(dims["vocab"], (dims["batch"], dims["seq"] + 1))
    args = (eqx.filter_shard(model, model_shardings), eqx.filter_shard(opt_state, opt_shardings),
            jax.device_put(tokens, token_sharding))  # fmt: skip
    return Program(
        name=NAME,
        description=f"equinox {dims['layers']}-block LM (eqx.nn), eqx.filter_jit + filter_shard,"
        " filter_value_and_grad, optax adamw; filter_jit(...).lower(...).compile()",
        fun=make_train_step(optimizer, model_shardings, opt_shardings, token_sharding),
        args=args,
        in_shardings=(model_shardings, opt_shardings, token_sharding),
        out_shardings=None,
        mesh=mesh,
        jit=filter_jit,
    )
