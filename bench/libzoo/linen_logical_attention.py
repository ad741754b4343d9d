"""A flax linen decoder sharded by logical axis names, trained from a ``TrainState``.

As flax's "Scale up Flax Modules on multiple devices" guide writes one: every
``nn.Dense`` kernel and the ``nn.Embed`` table are created with
``nn.with_logical_partitioning`` (boxed ``nn.LogicallyPartitioned``), the
residual stream and the MLP's hidden activations are pinned by
``nn.with_logical_constraint``, and ``nn.logical_axis_rules`` maps the names
(``batch`` -> ``data``; ``vocab``, ``mlp`` -> ``model``). Each block has an
``nn.MultiHeadDotProductAttention`` with a causal mask (``nn.make_causal_mask``)
and attention dropout, and an MLP with ``nn.Dropout`` drawing from the
``dropout`` rng stream; the output head is the embedding's ``attend`` (tied).
The state's shardings come from ``jax.eval_shape`` of the init,
``nn.get_partition_spec`` and ``nn.logical_to_mesh_sharding``; the
``flax.training.train_state.TrainState`` (``optax.adamw``) is initialised by
``jax.jit`` with those ``out_shardings``, and the donated train step is traced
inside ``jax.set_mesh`` and the rules.
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

NAME = "linen_logical_attention"
SIZES = {
    "small": dict(batch=8, seq=8, vocab=64, d_model=32, heads=4, layers=2),
    "large": dict(batch=32, seq=128, vocab=1024, d_model=256, heads=8, layers=4),
}
RULES = (("batch", "data"), ("length", None), ("embed", None), ("vocab", "model"),
         ("mlp", "model"))  # fmt: skip
DROPOUT = 0.1


def partitioned(init, names):
    return nn.with_logical_partitioning(init, names)


class Block(nn.Module):
    heads: int

    @nn.compact
    def __call__(self, x, train: bool):
        d_model = x.shape[-1]
        y = nn.LayerNorm()(x)
        y = nn.MultiHeadDotProductAttention(num_heads=self.heads, dropout_rate=DROPOUT,
                                            deterministic=not train)(
            y, y, mask=nn.make_causal_mask(jnp.ones(x.shape[:2])))  # fmt: skip
        x = nn.with_logical_constraint(x + y, ("batch", "length", "embed"))
        h = nn.Dense(2 * d_model, kernel_init=partitioned(nn.initializers.lecun_normal(),
                                                          ("embed", "mlp")))(nn.LayerNorm()(x))
        h = nn.with_logical_constraint(nn.gelu(h), ("batch", "length", "mlp"))
        h = nn.Dropout(DROPOUT, deterministic=not train)(h)
        h = nn.Dense(d_model, kernel_init=partitioned(nn.initializers.lecun_normal(),
                                                      ("mlp", "embed")))(h)  # fmt: skip
        return nn.with_logical_constraint(x + h, ("batch", "length", "embed"))


class LanguageModel(nn.Module):
    vocab: int
    d_model: int
    heads: int
    layers: int

    @nn.compact
    def __call__(self, tokens, train: bool = False):
        embed = nn.Embed(self.vocab, self.d_model, embedding_init=partitioned(
            nn.initializers.normal(0.02), ("vocab", "embed")))
        x = nn.with_logical_constraint(embed(tokens), ("batch", "length", "embed"))
        for _ in range(self.layers):
            x = Block(self.heads)(x, train)
        return embed.attend(nn.LayerNorm()(x))


def train_step(state: train_state.TrainState, tokens, key):
    def loss_fn(params):
        logits = state.apply_fn({"params": params}, tokens[:, :-1], train=True,
                                rngs={"dropout": key})  # fmt: skip
        return optax.softmax_cross_entropy_with_integer_labels(logits, tokens[:, 1:]).mean()

    with nn.logical_axis_rules(RULES):  # the constraints resolve while tracing
        loss, grads = jax.value_and_grad(loss_fn)(state.params)
    return state.apply_gradients(grads=grads), loss


def make(size: str = "small") -> Program:
    check_size(size)
    dims = SIZES[size]
    mesh = make_mesh((4, 2), ("data", "model"))
    model = LanguageModel(dims["vocab"], dims["d_model"], dims["heads"], dims["layers"])
    tokens = RandomArrays(seed=67).integers(dims["vocab"], (dims["batch"], dims["seq"] + 1))

    def init(key):
        params = model.init(key, jnp.asarray(tokens[:, :-1]))["params"]
        return train_state.TrainState.create(apply_fn=model.apply, params=params,
                                             tx=optax.adamw(1e-3, weight_decay=0.01))

    with jax.set_mesh(mesh), nn.logical_axis_rules(RULES):
        specs = nn.get_partition_spec(jax.eval_shape(init, jax.random.key(0)))
        state_shardings = nn.logical_to_mesh_sharding(specs, mesh, RULES)
        state = jax.jit(init, out_shardings=state_shardings)(jax.random.key(0))
    token_sharding = NamedSharding(mesh, P("data"))
    replicated = NamedSharding(mesh, P())
    return Program(
        name=NAME,
        description="flax linen decoder (MultiHeadDotProductAttention, Dropout, tied "
        "Embed.attend), with_logical_partitioning / with_logical_constraint under "
        "logical_axis_rules, TrainState(adamw) donated",
        fun=train_step,
        args=(state, jax.device_put(tokens, token_sharding),
              jax.device_put(jax.random.key(3), replicated)),
        in_shardings=(state_shardings, token_sharding, replicated),
        out_shardings=(state_shardings, replicated),
        mesh=mesh,
        donate_argnums=(0,),
        mesh_context=True,
    )
