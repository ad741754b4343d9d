"""A flax linen decoder LM sharded as flax's logical-partitioning guide shards one.

Every kernel is made by ``nn.with_logical_partitioning`` (the embedding table on
``vocab``, attention on ``heads``, the MLP on ``mlp``; flax's
``MultiHeadDotProductAttention`` with causal masking and attention dropout), the
residual stream is pinned by ``nn.with_logical_constraint``, and ``nn.Dropout``
draws from a key folded with the step. The ``TrainState`` (``optax.chain`` of
``clip_by_global_norm`` and ``adamw`` on a ``warmup_cosine_decay_schedule``) is
created by a ``jax.jit`` with ``out_shardings`` from
``nn.logical_to_mesh_sharding(nn.get_partition_spec(jax.eval_shape(init)))``,
then donated to the step; the embedding is tied (``embed.attend``). Tokens are
split over ``data`` of a 2x4 (data, model) mesh.
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax
from flax.training import train_state
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from bench.models.program import Program, RandomArrays, check_size, make_mesh

NAME = "linen_lm_clip_adamw"
SIZES = {
    "small": dict(batch=8, seq=16, vocab=128, d=64, heads=4, mlp=256, layers=2),
    "large": dict(batch=32, seq=128, vocab=1024, d=256, heads=8, mlp=1024, layers=4),
}
RULES = (
    ("batch", "data"), ("vocab", "model"), ("embed", None), ("mlp", "model"),
    ("heads", "model"), ("length", None),
)  # fmt: skip


def partitioned(init, names):
    return nn.with_logical_partitioning(init, names)


class Block(nn.Module):
    d: int
    heads: int
    mlp: int
    rate: float = 0.1

    @nn.compact
    def __call__(self, x, deterministic):
        xavier, lecun = nn.initializers.xavier_uniform(), nn.initializers.lecun_normal()
        y = nn.LayerNorm()(x)
        y = nn.MultiHeadDotProductAttention(
            num_heads=self.heads,
            dropout_rate=self.rate,
            deterministic=deterministic,
            kernel_init=partitioned(xavier, ("embed", "heads")),
            out_kernel_init=partitioned(xavier, ("heads", "embed")),
        )(y, mask=nn.make_causal_mask(jnp.ones(x.shape[:2])))
        x = x + nn.Dropout(self.rate)(y, deterministic=deterministic)
        x = nn.with_logical_constraint(x, ("batch", "length", "embed"))
        y = nn.Dense(self.mlp, kernel_init=partitioned(lecun, ("embed", "mlp")))(nn.LayerNorm()(x))
        y = nn.with_logical_constraint(nn.gelu(y), ("batch", "length", "mlp"))
        y = nn.Dense(self.d, kernel_init=partitioned(lecun, ("mlp", "embed")))(y)
        return x + nn.Dropout(self.rate)(y, deterministic=deterministic)


class LM(nn.Module):
    vocab: int
    d: int
    heads: int
    mlp: int
    layers: int

    @nn.compact
    def __call__(self, tokens, deterministic=True):
        embed = nn.Embed(
            self.vocab, self.d,
            embedding_init=partitioned(nn.initializers.normal(0.02), ("vocab", "embed")),
        )  # fmt: skip
        x = nn.with_logical_constraint(embed(tokens), ("batch", "length", "embed"))
        for _ in range(self.layers):
            x = Block(self.d, self.heads, self.mlp)(x, deterministic)
        return embed.attend(nn.LayerNorm()(x))


def make(size: str = "small") -> Program:
    check_size(size)
    dims = SIZES[size]
    mesh = make_mesh((2, 4), ("data", "model"))
    model = LM(dims["vocab"], dims["d"], dims["heads"], dims["mlp"], dims["layers"])
    schedule = optax.warmup_cosine_decay_schedule(0.0, 3e-4, 10, 100)
    tx = optax.chain(optax.clip_by_global_norm(1.0), optax.adamw(schedule, weight_decay=0.1))

    def init(rng):
        params = model.init(rng, jnp.zeros((1, dims["seq"]), jnp.int32))["params"]
        return train_state.TrainState.create(apply_fn=model.apply, params=params, tx=tx)

    abstract = jax.eval_shape(init, jax.random.key(0))
    state_sharding = nn.logical_to_mesh_sharding(nn.get_partition_spec(abstract), mesh, RULES)
    with jax.set_mesh(mesh), nn.logical_axis_rules(RULES):
        state = jax.jit(init, out_shardings=state_sharding)(jax.random.key(0))
    batch, replicated = NamedSharding(mesh, P("data")), NamedSharding(mesh, P())
    tokens = RandomArrays(seed=201).integers(dims["vocab"], (dims["batch"], dims["seq"] + 1))
    tokens = jax.device_put(tokens, batch)
    dropout_key = jax.device_put(jax.random.key(1), replicated)

    def train_step(state, tokens, dropout_key):
        with nn.logical_axis_rules(RULES):

            def loss_fn(params):
                rngs = {"dropout": jax.random.fold_in(dropout_key, state.step)}
                logits = state.apply_fn(
                    {"params": params}, tokens[:, :-1], deterministic=False, rngs=rngs
                )
                return optax.softmax_cross_entropy_with_integer_labels(
                    logits, tokens[:, 1:]
                ).mean()

            loss, grads = jax.value_and_grad(loss_fn)(state.params)
            return state.apply_gradients(grads=grads), loss

    return Program(
        name=NAME,
        description="linen LM: with_logical_partitioning, attention + residual dropout, tied "
        "embedding, TrainState clip + adamw(warmup cosine), 2x4",
        fun=train_step,
        args=(state, tokens, dropout_key),
        in_shardings=(state_sharding, batch, replicated),
        out_shardings=(state_sharding, replicated),
        mesh=mesh,
        donate_argnums=(0,),
    )
