"""A flax linen encoder-decoder trained with padding, causal and cross-attention masks.

``nn.MultiHeadDotProductAttention`` runs encoder self-attention under a padding
mask (``nn.make_attention_mask`` of ``tokens > 0``), decoder self-attention
under ``nn.combine_masks(nn.make_causal_mask, padding)`` and cross-attention
under the target-by-source padding mask, with attention dropout; Dense and
Embed parameters are partitioned by logical names
(``nn.with_logical_partitioning``, ``nn.logical_axis_rules``: ``mlp`` /
``vocab`` over ``model``, ``batch`` over ``data``), the decoder's output
constrained by ``nn.with_logical_constraint`` (mesh 4x2). The loss is
label-smoothed cross entropy weighted by the target padding; ``optax.adamw``
on a warmup schedule, state donated.
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from bench.models.program import Program, RandomArrays, check_size, make_mesh

NAME = "linen_seq2seq_masks"
SIZES = {
    "small": dict(batch=8, src=8, tgt=8, vocab=40, d=32, heads=4, mlp=64),
    "large": dict(batch=64, src=64, tgt=64, vocab=1000, d=256, heads=8, mlp=1024),
}
RULES = (
    ("batch", "data"),
    ("embed", None),
    ("heads", "model"),
    ("kv", None),
    ("mlp", "model"),
    ("vocab", "model"),
)
kinit = nn.initializers.xavier_uniform()


def dense(features, names, **kw):
    return nn.Dense(features, kernel_init=nn.with_logical_partitioning(kinit, names), **kw)


class Mlp(nn.Module):
    d: int
    mlp: int

    @nn.compact
    def __call__(self, x, train):
        h = nn.relu(dense(self.mlp, ("embed", "mlp"))(x))
        h = nn.Dropout(0.1, deterministic=not train)(h)
        return dense(self.d, ("mlp", "embed"))(h)


def attention(heads, name):
    return nn.MultiHeadDotProductAttention(
        num_heads=heads, dropout_rate=0.1, name=name, kernel_init=kinit
    )


class Seq2Seq(nn.Module):
    vocab: int
    d: int
    heads: int
    mlp: int

    @nn.compact
    def __call__(self, src, tgt, train):
        embed = nn.Embed(
            self.vocab,
            self.d,
            embedding_init=nn.with_logical_partitioning(
                nn.initializers.normal(0.02), ("vocab", "embed")
            ),
        )
        src_mask = nn.make_attention_mask(src > 0, src > 0)
        x = embed(src)
        x = x + attention(self.heads, "enc_self")(
            nn.LayerNorm()(x), mask=src_mask, deterministic=not train
        )
        enc = nn.LayerNorm()(x + Mlp(self.d, self.mlp)(nn.LayerNorm()(x), train))
        dec_mask = nn.combine_masks(
            nn.make_causal_mask(tgt), nn.make_attention_mask(tgt > 0, tgt > 0)
        )
        y = embed(tgt)
        y = y + attention(self.heads, "dec_self")(
            nn.LayerNorm()(y), mask=dec_mask, deterministic=not train
        )
        cross_mask = nn.make_attention_mask(tgt > 0, src > 0)
        y = y + attention(self.heads, "cross")(
            nn.LayerNorm()(y), enc, mask=cross_mask, deterministic=not train
        )
        y = y + Mlp(self.d, self.mlp)(nn.LayerNorm()(y), train)
        y = nn.with_logical_constraint(y, ("batch", None, "embed"))
        return embed.attend(nn.LayerNorm()(y))


def make(size="small"):
    check_size(size)
    d = SIZES[size]
    mesh = make_mesh((4, 2), ("data", "model"))
    model = Seq2Seq(d["vocab"], d["d"], d["heads"], d["mlp"])
    tx = optax.adamw(optax.linear_schedule(0.0, 1e-3, 100), weight_decay=0.01)
    rand = RandomArrays(seed=1104)
    src = rand.integers(d["vocab"], (d["batch"], d["src"]))
    src[:, -2:] = 0
    tgt = rand.integers(d["vocab"], (d["batch"], d["tgt"] + 1))
    tgt[:, -1] = 0

    def init(key):
        params = model.init({"params": key}, src[:1], tgt[:1, :-1], train=False)["params"]
        return params, tx.init(params)

    with nn.logical_axis_rules(RULES):
        abstract = jax.eval_shape(init, jax.random.key(0))
        state_sh = nn.logical_to_mesh_sharding(nn.get_partition_spec(abstract), mesh, RULES)
    params, opt_state = jax.jit(init, out_shardings=state_sh)(jax.random.key(0))
    params, opt_state = nn.unbox((params, opt_state))
    p_sh, o_sh = state_sh
    b_sh = NamedSharding(mesh, P("data"))

    def train_step(params, opt_state, src, tgt, key):
        def loss_fn(params):
            with nn.logical_axis_rules(RULES):
                logits = model.apply(
                    {"params": params}, src, tgt[:, :-1], train=True, rngs={"dropout": key}
                )
            labels = optax.smooth_labels(jax.nn.one_hot(tgt[:, 1:], d["vocab"]), 0.1)
            weights = (tgt[:, 1:] > 0).astype(jnp.float32)
            return (optax.softmax_cross_entropy(logits, labels) * weights).sum() / weights.sum()

        loss, grads = jax.value_and_grad(loss_fn)(params)
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    return Program(
        name=NAME,
        description="linen enc-dec MultiHeadDotProductAttention with padding/causal/cross masks, logical rules, dropout, 4x2",
        fun=train_step,
        args=(
            params,
            opt_state,
            jax.device_put(src, b_sh),
            jax.device_put(tgt, b_sh),
            jax.random.key(3),
        ),
        in_shardings=(p_sh, o_sh, b_sh, b_sh, NamedSharding(mesh, P())),
        out_shardings=(p_sh, o_sh, None),
        mesh=mesh,
        donate_argnums=(0, 1),
        mesh_context=True,
    )
