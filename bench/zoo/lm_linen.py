"""A decoder-only language model's train step in flax.linen, sharded by logical axis names.

Written the way the flax guide "Scale up Flax Modules on multiple devices" does
it: every parameter's initializer is wrapped in ``nn.with_logical_partitioning``
(logical names such as ``embed``, ``mlp``, ``heads``), activations are pinned
with ``nn.with_logical_constraint``, and ``LOGICAL_RULES`` map the names to the
mesh: parameters are FSDP-sharded on ``data`` (their ``embed`` dimension) and
tensor-parallel on ``model`` (heads, MLP hidden units, vocabulary); the batch
is on ``data``. The train state is a ``flax.training.train_state.TrainState``
(boxed parameters + ``optax.adamw`` state) whose shardings come from
``nn.get_partition_spec`` + ``nn.logical_to_mesh_sharding``; it is donated to the
step, which returns ``(new_state, loss)``. Bare ``PartitionSpec`` constraints
resolve against ``jax.set_mesh(mesh)`` (``Program.mesh_context``). The output
head is tied to the embedding (``nn.Embed.attend``).

``constrain_activations=False`` on the model (``lm_linen_unconstrained``) skips
every ``nn.with_logical_constraint`` on activations; the parameters keep their
logical partitioning, so propagation alone decides how activations are sharded.
"""

from __future__ import annotations

import functools

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax
from flax.training import train_state
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from bench.models.program import Program, RandomArrays, check_size, make_mesh, place

NAME = "lm_linen"
SIZES = {
    "small": dict(batch=8, seq=16, vocab=64, d_model=32, heads=4, mlp=64, layers=2),
    "large": dict(batch=16, seq=128, vocab=1024, d_model=256, heads=8, mlp=1024, layers=4),
}
# Logical axis name -> mesh axis. Parameters: `embed` is the FSDP dimension,
# `mlp` / `heads` / `vocab` the tensor-parallel ones. Activations have their
# own names (`act_*`) so that they do not inherit the FSDP split of `embed`.
LOGICAL_RULES = (
    ("batch", "data"),
    ("embed", "data"),
    ("mlp", "model"),
    ("heads", "model"),
    ("vocab", "model"),
    ("kv", None),
    ("norm", None),
    ("length", None),
    ("act_embed", None),
    ("act_mlp", "model"),
    ("act_heads", "model"),
    ("act_vocab", "model"),
)
LEARNING_RATE = 1e-3


def partitioned(init, *names):
    return nn.with_logical_partitioning(init, names)


def constrain(module: nn.Module, x: jax.Array, names: tuple) -> jax.Array:
    """``x`` pinned to the logical ``names``, unless ``module`` leaves activations free."""
    return nn.with_logical_constraint(x, names) if module.constrain_activations else x


class Attention(nn.Module):
    heads: int
    dtype: jnp.dtype = jnp.float32
    constrain_activations: bool = True

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        batch, seq, d_model = x.shape
        head_dim = d_model // self.heads
        init = nn.initializers.lecun_normal()
        # One Dense per projection, split into heads after: flax's DenseGeneral
        # reshapes its kernel inside the initializer, which its logical boxes do
        # not survive (the rank-2 kernel meets the rank-3 names).
        projection = functools.partial(
            nn.Dense, d_model, use_bias=False, dtype=self.dtype,
            kernel_init=partitioned(init, "embed", "heads"),
        )  # fmt: skip
        q, k, v = (
            constrain(
                self, projection(name=name)(x).reshape(batch, seq, self.heads, head_dim),
                ("batch", "length", "act_heads", "kv"),
            )
            for name in ("query", "key", "value")
        )
        scores = jnp.einsum("bqhd,bkhd->bhqk", q, k) / jnp.sqrt(head_dim).astype(self.dtype)
        causal = nn.make_causal_mask(jnp.ones((batch, seq), jnp.int32))
        scores = jnp.where(causal, scores, jnp.finfo(scores.dtype).min)
        probs = nn.softmax(scores, axis=-1)
        mixed = jnp.einsum("bhqk,bkhd->bqhd", probs, v).reshape(batch, seq, d_model)
        out = nn.Dense(
            d_model, use_bias=False, dtype=self.dtype, name="out",
            kernel_init=partitioned(init, "heads", "embed"),
        )(mixed)  # fmt: skip
        return constrain(self, out, ("batch", "length", "act_embed"))


class Mlp(nn.Module):
    hidden: int
    dtype: jnp.dtype = jnp.float32
    constrain_activations: bool = True

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        init = nn.initializers.lecun_normal()
        h = nn.Dense(self.hidden, dtype=self.dtype, name="up",
                     kernel_init=partitioned(init, "embed", "mlp"),
                     bias_init=partitioned(nn.initializers.zeros, "mlp"))(x)  # fmt: skip
        h = constrain(self, nn.gelu(h), ("batch", "length", "act_mlp"))
        out = nn.Dense(x.shape[-1], dtype=self.dtype, name="down",
                       kernel_init=partitioned(init, "mlp", "embed"),
                       bias_init=partitioned(nn.initializers.zeros, "embed"))(h)  # fmt: skip
        return constrain(self, out, ("batch", "length", "act_embed"))


def layer_norm(name: str) -> nn.LayerNorm:
    return nn.LayerNorm(
        name=name,
        scale_init=partitioned(nn.initializers.ones, "norm"),
        bias_init=partitioned(nn.initializers.zeros, "norm"),
    )


class Block(nn.Module):
    """Pre-LayerNorm attention + MLP with residuals."""

    heads: int
    mlp: int
    constrain_activations: bool = True

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        constrained = self.constrain_activations
        x = x + Attention(self.heads, name="attention", constrain_activations=constrained)(
            layer_norm("ln1")(x))
        x = x + Mlp(self.mlp, name="mlp", constrain_activations=constrained)(
            layer_norm("ln2")(x))
        return constrain(self, x, ("batch", "length", "act_embed"))


class LanguageModel(nn.Module):
    vocab: int
    d_model: int
    heads: int
    mlp: int
    layers: int
    constrain_activations: bool = True

    @nn.compact
    def __call__(self, tokens: jax.Array) -> jax.Array:
        embed = nn.Embed(
            self.vocab, self.d_model, name="embed",
            embedding_init=partitioned(nn.initializers.normal(1.0), "vocab", "embed"),
        )  # fmt: skip
        x = constrain(self, embed(tokens), ("batch", "length", "act_embed"))
        for i in range(self.layers):
            x = Block(self.heads, self.mlp, name=f"block_{i}",
                      constrain_activations=self.constrain_activations)(x)
        x = layer_norm("ln_final")(x)
        logits = embed.attend(x)  # tied output head
        return constrain(self, logits, ("batch", "length", "act_vocab"))


def cross_entropy(logits: jax.Array, targets: jax.Array) -> jax.Array:
    return optax.softmax_cross_entropy_with_integer_labels(logits, targets).mean()


def train_step(state: train_state.TrainState, tokens: jax.Array):
    """One adamw step on next-token prediction; returns ``(new_state, loss)``."""

    def loss_fn(params):
        logits = state.apply_fn({"params": params}, tokens[:, :-1])
        return cross_entropy(logits, tokens[:, 1:])

    with nn.logical_axis_rules(LOGICAL_RULES):
        loss, grads = jax.value_and_grad(loss_fn)(state.params)
    return state.apply_gradients(grads=grads), loss


def create_state(model: nn.Module, tokens: jax.Array, optimizer) -> train_state.TrainState:
    variables = model.init(jax.random.key(0, impl="rbg"), tokens)  # rbg: fast to compile on CPU
    return train_state.TrainState.create(
        apply_fn=model.apply, params=variables["params"], tx=optimizer
    )


def sharded_state(model: nn.Module, tokens: jax.Array, optimizer, mesh, rules=LOGICAL_RULES):
    """The initial train state placed on ``mesh``, and its shardings (the flax guide's
    ``jax.eval_shape`` + ``nn.get_partition_spec`` + ``nn.logical_to_mesh_sharding``)."""
    init = functools.partial(create_state, model, optimizer=optimizer)
    abstract_state = jax.eval_shape(init, tokens)
    logical_specs = nn.get_partition_spec(abstract_state)
    state_shardings = nn.logical_to_mesh_sharding(logical_specs, mesh, rules)
    return jax.jit(init, out_shardings=state_shardings)(tokens), state_shardings


def make(size: str = "small", *, constrain_activations: bool = True, name: str = NAME,
         description: str = "") -> Program:
    """The program; ``lm_linen_unconstrained`` builds it with ``constrain_activations=False``
    under its own ``name``, its ``description`` leading the generated one."""
    check_size(size)
    dims = SIZES[size]
    mesh = make_mesh((4, 2), ("data", "model"))
    model = LanguageModel(dims["vocab"], dims["d_model"], dims["heads"], dims["mlp"],
                          dims["layers"], constrain_activations)  # fmt: skip
    tokens = RandomArrays(seed=21).integers(dims["vocab"], (dims["batch"], dims["seq"] + 1))
    state, state_shardings = sharded_state(
        model, tokens[:, :-1], optax.adamw(LEARNING_RATE, weight_decay=0.01), mesh
    )
    token_sharding = nn.logical_to_mesh_sharding(P("batch", "length"), mesh, LOGICAL_RULES)
    in_shardings = (state_shardings, token_sharding)
    return Program(
        name=name,
        description=f"{description}flax.linen {dims['layers']}-block LM, logical axes (FSDP "
        "`data`, TP `model`), adamw, donated TrainState",
        fun=train_step,
        args=(state, place(tokens, token_sharding)),
        in_shardings=in_shardings,
        out_shardings=(state_shardings, NamedSharding(mesh, P())),
        mesh=mesh,
        donate_argnums=(0,),
        mesh_context=True,
    )
