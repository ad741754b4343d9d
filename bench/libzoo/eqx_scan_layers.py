"""An equinox LM whose layers are stacked by ``eqx.filter_vmap`` and run by ``lax.scan``.

Equinox's "scan over layers" pattern: ``eqx.filter_vmap(Layer)(keys)`` builds
one ``Layer`` whose arrays carry a leading layer axis, and the forward pass
``eqx.partition``-s it into arrays and static parts, scanning
``eqx.combine(layer_arrays, static)`` over the arrays. Each layer is an
``RMSNorm``, a causal ``MultiheadAttention`` whose heads get a
``RotaryPositionalEmbedding`` through ``process_heads``, and a SiLU MLP; the
token embedding and the output head share one matrix through
``eqx.nn.Shared``. A custom stateful layer keeps a call count and a running
mean of the pooled activations in ``eqx.nn.State`` (an ``eqx.nn.StateIndex``,
``eqx.nn.make_with_state``), averaged over the batch with ``lax.pmean`` under
``eqx.filter_vmap(..., axis_name="batch")``. The step takes
``eqx.filter_grad(..., has_aux=True)``, applies SGD, puts the norms' old
weights back with ``eqx.tree_at`` (frozen) and re-evaluates the loss; it is
``eqx.filter_jit``-ed, the stacked matrices split over ``model`` on their
output dimension (``eqx.filter_shard``), the tokens over ``data``.
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from bench.libzoo.equinox_jit import filter_jit
from bench.models.program import Program, RandomArrays, check_size, make_mesh

NAME = "eqx_scan_layers"
SIZES = {
    "small": dict(batch=8, seq=8, vocab=64, d_model=32, heads=4, layers=3),
    "large": dict(batch=16, seq=128, vocab=1024, d_model=256, heads=8, layers=8),
}
LEARNING_RATE = 0.1


class Layer(eqx.Module):
    norm: eqx.nn.RMSNorm
    attention: eqx.nn.MultiheadAttention
    rope: eqx.nn.RotaryPositionalEmbedding
    up: eqx.nn.Linear
    down: eqx.nn.Linear

    def __init__(self, d_model: int, heads: int, key: jax.Array):
        attention_key, up_key, down_key = jax.random.split(key, 3)
        self.norm = eqx.nn.RMSNorm(d_model)
        self.attention = eqx.nn.MultiheadAttention(heads, d_model, key=attention_key)
        self.rope = eqx.nn.RotaryPositionalEmbedding(d_model // heads)
        self.up = eqx.nn.Linear(d_model, 2 * d_model, key=up_key)
        self.down = eqx.nn.Linear(2 * d_model, d_model, key=down_key)

    def __call__(self, x: jax.Array) -> jax.Array:  # (seq, d_model)
        rotate = jax.vmap(self.rope, in_axes=1, out_axes=1)  # over the heads axis

        def process_heads(query, key, value):
            return rotate(query), rotate(key), value

        y = jax.vmap(self.norm)(x)
        causal = jnp.tril(jnp.ones((x.shape[0], x.shape[0]), dtype=bool))
        x = x + self.attention(y, y, y, mask=causal, process_heads=process_heads)
        return x + jax.vmap(lambda t: self.down(jax.nn.silu(self.up(t))))(x)


class PooledMean(eqx.Module):
    """Counts its calls and keeps the running mean of the pooled activation."""

    index: eqx.nn.StateIndex

    def __init__(self, d_model: int):
        self.index = eqx.nn.StateIndex((jnp.zeros((), jnp.int32), jnp.zeros(d_model)))

    def __call__(self, x: jax.Array, state: eqx.nn.State):
        count, mean = state.get(self.index)
        pooled = jax.lax.pmean(jnp.mean(x, axis=0), "batch")
        mean = (mean * count + pooled) / (count + 1)
        return x, state.set(self.index, (count + 1, mean))


class LanguageModel(eqx.Module):
    shared: eqx.nn.Shared
    layers: Layer  # every array with a leading layer axis
    pooled: PooledMean
    norm: eqx.nn.RMSNorm

    def __init__(self, vocab: int, d_model: int, heads: int, layers: int, key: jax.Array):
        embed_key, head_key, layers_key = jax.random.split(key, 3)
        embed = eqx.nn.Embedding(vocab, d_model, key=embed_key)
        head = eqx.nn.Linear(d_model, vocab, use_bias=False, key=head_key)
        self.shared = eqx.nn.Shared((embed, head), lambda pair: pair[1].weight,
                                    lambda pair: pair[0].weight)  # fmt: skip
        self.layers = eqx.filter_vmap(lambda k: Layer(d_model, heads, k))(
            jax.random.split(layers_key, layers))
        self.pooled = PooledMean(d_model)
        self.norm = eqx.nn.RMSNorm(d_model)

    def __call__(self, tokens: jax.Array, state: eqx.nn.State):
        embed, head = self.shared()
        x = jax.vmap(embed)(tokens)
        arrays, static = eqx.partition(self.layers, eqx.is_array)

        def body(x, layer_arrays):
            return eqx.combine(layer_arrays, static)(x), None

        x, _ = jax.lax.scan(body, x, arrays)
        x, state = self.pooled(x, state)
        return jax.vmap(head)(jax.vmap(self.norm)(x)), state


def shardings_of(model: LanguageModel, layers: int, mesh) -> LanguageModel:
    """The stacked matrices split over ``model`` on their output dimension, the rest
    replicated."""
    def sharding(leaf):
        stacked = leaf.ndim == 3 and leaf.shape[0] == layers
        return NamedSharding(mesh, P(None, "model", None) if stacked else P())
    return jax.tree.map(sharding, eqx.filter(model, eqx.is_array))


def make_train_step(model_shardings, token_sharding):
    def loss_fn(model, state, tokens):
        batched = eqx.filter_vmap(model, in_axes=(0, None), out_axes=(0, None),
                                  axis_name="batch")  # fmt: skip
        logits, state = batched(tokens[:, :-1], state)
        log_probs = jax.nn.log_softmax(logits)
        return -jnp.mean(jnp.take_along_axis(log_probs, tokens[:, 1:, None], -1)), state

    def train_step(model, state, tokens):
        model = eqx.filter_shard(model, model_shardings)
        tokens = eqx.filter_shard(tokens, token_sharding)
        grads, state = eqx.filter_grad(loss_fn, has_aux=True)(model, state, tokens)
        arrays, static = eqx.partition(model, eqx.is_array)
        updated = eqx.combine(
            jax.tree.map(lambda p, g: p - LEARNING_RATE * g, arrays, grads), static)
        frozen = eqx.tree_at(lambda m: (m.norm.weight, m.layers.norm.weight), updated,
                             (model.norm.weight, model.layers.norm.weight))  # fmt: skip
        loss, _ = loss_fn(frozen, state, tokens)
        return eqx.filter_shard(frozen, model_shardings), state, loss

    return train_step


def make(size: str = "small") -> Program:
    check_size(size)
    dims = SIZES[size]
    mesh = make_mesh((4, 2), ("data", "model"))
    model, state = eqx.nn.make_with_state(LanguageModel)(
        dims["vocab"], dims["d_model"], dims["heads"], dims["layers"], jax.random.key(0))
    model_shardings = shardings_of(model, dims["layers"], mesh)
    replicated = NamedSharding(mesh, P())
    token_sharding = NamedSharding(mesh, P("data"))
    tokens = RandomArrays(seed=61).integers(dims["vocab"], (dims["batch"], dims["seq"] + 1))
    args = (eqx.filter_shard(model, model_shardings), eqx.filter_shard(state, replicated),
            jax.device_put(tokens, token_sharding))  # fmt: skip
    return Program(
        name=NAME,
        description=f"equinox {dims['layers']} layers stacked by filter_vmap, run by lax.scan "
        "(partition/combine); RoPE attention, Shared embedding, StateIndex state, "
        "filter_grad + tree_at, filter_jit",
        fun=make_train_step(model_shardings, token_sharding),
        args=args,
        in_shardings=(model_shardings, replicated, token_sharding),
        out_shardings=None,
        mesh=mesh,
        jit=filter_jit,
    )
