"""An equinox decoder LM with rotary attention and a vocabulary sharded over ``model``.

``eqx.nn.MultiheadAttention`` under a causal mask, with
``eqx.nn.RotaryPositionalEmbedding`` applied to queries and keys through its
``process_heads`` hook, ``eqx.nn.RMSNorm`` and a SiLU MLP; the
``eqx.nn.Embedding`` table's rows and the projections sharded over ``model`` by
``eqx.filter_shard`` with a tree built by path; ``optax.adamw`` under
``eqx.filter_jit(donate='all-except-first')``, the batch over ``data`` of a 2x4 mesh.
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

NAME = "eqx_rope_mha_lm"
SIZES = {
    "small": dict(batch=8, seq=16, vocab=64, d=32, heads=4, layers=2),
    "large": dict(batch=32, seq=128, vocab=1024, d=256, heads=8, layers=4),
}


class Block(eqx.Module):
    attn: eqx.nn.MultiheadAttention
    rope: eqx.nn.RotaryPositionalEmbedding
    norm1: eqx.nn.RMSNorm
    norm2: eqx.nn.RMSNorm
    up: eqx.nn.Linear
    down: eqx.nn.Linear

    def __init__(self, d, heads, key):
        k1, k2, k3 = jax.random.split(key, 3)
        self.attn = eqx.nn.MultiheadAttention(heads, d, key=k1)
        self.rope = eqx.nn.RotaryPositionalEmbedding(d // heads)
        self.norm1 = eqx.nn.RMSNorm(d)
        self.norm2 = eqx.nn.RMSNorm(d)
        self.up = eqx.nn.Linear(d, 4 * d, key=k2)
        self.down = eqx.nn.Linear(4 * d, d, key=k3)

    def __call__(self, x):  # x: (seq, d)
        seq = x.shape[0]
        mask = jnp.tril(jnp.ones((seq, seq), bool))

        def process_heads(q, k, v):
            q = jax.vmap(self.rope, in_axes=1, out_axes=1)(q)
            k = jax.vmap(self.rope, in_axes=1, out_axes=1)(k)
            return q, k, v

        h = jax.vmap(self.norm1)(x)
        x = x + self.attn(h, h, h, mask=mask, process_heads=process_heads)
        h = jax.vmap(self.norm2)(x)
        return x + jax.vmap(self.down)(jax.nn.silu(jax.vmap(self.up)(h)))


class LM(eqx.Module):
    embed: eqx.nn.Embedding
    blocks: tuple
    norm: eqx.nn.RMSNorm
    head: eqx.nn.Linear

    def __init__(self, d, key):
        keys = jax.random.split(key, d["layers"] + 2)
        self.embed = eqx.nn.Embedding(d["vocab"], d["d"], key=keys[0])
        self.blocks = tuple(Block(d["d"], d["heads"], k) for k in keys[2:])
        self.norm = eqx.nn.RMSNorm(d["d"])
        self.head = eqx.nn.Linear(d["d"], d["vocab"], use_bias=False, key=keys[1])

    def __call__(self, tokens):
        x = jax.vmap(self.embed)(tokens)
        for b in self.blocks:
            x = b(x)
        return jax.vmap(self.head)(jax.vmap(self.norm)(x))


def make(size="small"):
    check_size(size)
    d = SIZES[size]
    mesh = make_mesh((2, 4), ("data", "model"))
    model = LM(d, jax.random.key(0))

    def spec_of(path, leaf):
        names = [getattr(k, "name", "") for k in path]
        if "embed" in names and leaf.ndim == 2:
            return NamedSharding(mesh, P("model", None))
        if (
            names[-1] == "weight"
            and leaf.ndim == 2
            and any(n in names for n in ("query_proj", "key_proj", "value_proj", "up"))
        ):
            return NamedSharding(mesh, P("model", None))
        if (
            names[-1] == "weight"
            and leaf.ndim == 2
            and any(n in names for n in ("output_proj", "down"))
        ):
            return NamedSharding(mesh, P(None, "model"))
        return NamedSharding(mesh, P())

    shard = jax.tree_util.tree_map_with_path(spec_of, eqx.filter(model, eqx.is_array))
    model = eqx.filter_shard(model, shard)
    tx = optax.adamw(3e-4, weight_decay=0.1)
    opt_state = eqx.filter_shard(
        tx.init(eqx.filter(model, eqx.is_inexact_array)), NamedSharding(mesh, P())
    )
    tokens = jax.device_put(
        RandomArrays(seed=1201).integers(d["vocab"], (d["batch"], d["seq"] + 1)),
        NamedSharding(mesh, P("data")),
    )

    def step(model, opt_state, tokens):
        def loss_fn(model):
            logits = jax.vmap(model)(tokens[:, :-1])
            return optax.softmax_cross_entropy_with_integer_labels(logits, tokens[:, 1:]).mean()

        loss, grads = eqx.filter_value_and_grad(loss_fn)(model)
        updates, opt_state = tx.update(grads, opt_state, eqx.filter(model, eqx.is_inexact_array))
        model = eqx.apply_updates(model, updates)
        return eqx.filter_shard(model, shard), opt_state, loss

    def jit(jit_function, fun):
        return filter_jit(jit_function, fun, donate="all-except-first")

    return Program(
        name=NAME,
        description="eqx MHA + RotaryPositionalEmbedding LM, vocab-sharded Embedding, filter_jit, 2x4",
        fun=step,
        args=(model, opt_state, tokens),
        in_shardings=None,
        out_shardings=None,
        mesh=mesh,
        donate_argnums=(1, 2),
        jit=jit,
    )
