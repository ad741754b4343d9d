"""``lm_linen``'s language model with its blocks stacked by ``nn.scan`` over ``nn.remat``.

The layers are one ``nn.scan`` (parameters stacked on a leading ``layers``
axis, ``metadata_params`` naming it for the logical rules, where it is not
sharded) of a rematerialized block (``nn.remat``: the backward pass recomputes
each block's activations), the standard way to keep compile time flat in depth.
The step is written without ``TrainState``: unboxed parameters
(``nn.meta.unbox``) and the ``optax.adamw`` state in, ``jax.value_and_grad``,
``optax.apply_updates``, and ``(params, opt_state, loss)`` out. The backward
pass of the scan is a reverse ``while`` loop whose body holds the blocks'
sharding constraints.
"""

from __future__ import annotations

import flax.linen as nn
import jax
import optax
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from bench.models.program import Program, RandomArrays, check_size, make_mesh, place
from bench.zoo.lm_linen import LOGICAL_RULES, Block, cross_entropy, layer_norm, partitioned

NAME = "lm_scan_layers"
SIZES = {
    "small": dict(batch=8, seq=16, vocab=64, d_model=32, heads=4, mlp=64, layers=2),
    "large": dict(batch=16, seq=128, vocab=1024, d_model=256, heads=8, mlp=1024, layers=8),
}
RULES = (*LOGICAL_RULES, ("layers", None))
LEARNING_RATE = 1e-3


class ScannedBlock(nn.Module):
    """One block in ``nn.scan``'s ``(carry, x) -> (carry, y)`` form."""

    heads: int
    mlp: int

    @nn.compact
    def __call__(self, x: jax.Array, _) -> tuple[jax.Array, None]:
        return Block(self.heads, self.mlp, name="block")(x), None


class ScannedLanguageModel(nn.Module):
    vocab: int
    d_model: int
    heads: int
    mlp: int
    layers: int

    @nn.compact
    def __call__(self, tokens: jax.Array) -> jax.Array:
        embed = nn.Embed(
            self.vocab, self.d_model, name="embed",
            embedding_init=partitioned(nn.initializers.normal(1.0), "vocab", "embed"),
        )  # fmt: skip
        x = nn.with_logical_constraint(embed(tokens), ("batch", "length", "act_embed"))
        blocks = nn.scan(
            nn.remat(ScannedBlock, prevent_cse=False),
            variable_axes={"params": 0},
            split_rngs={"params": True},
            length=self.layers,
            metadata_params={nn.PARTITION_NAME: "layers"},
        )  # fmt: skip
        x, _ = blocks(self.heads, self.mlp, name="blocks")(x, None)
        x = layer_norm("ln_final")(x)
        head = nn.Dense(self.vocab, use_bias=False, name="head",
                        kernel_init=partitioned(nn.initializers.lecun_normal(), "embed", "vocab"))
        return nn.with_logical_constraint(head(x), ("batch", "length", "act_vocab"))


def make_train_step(model: nn.Module, optimizer: optax.GradientTransformation):
    def train_step(params, opt_state, tokens: jax.Array):
        def loss_fn(params):
            return cross_entropy(model.apply({"params": params}, tokens[:, :-1]), tokens[:, 1:])

        with nn.logical_axis_rules(RULES):
            loss, grads = jax.value_and_grad(loss_fn)(params)
        updates, opt_state = optimizer.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    return train_step


def make(size: str = "small") -> Program:
    check_size(size)
    dims = SIZES[size]
    mesh = make_mesh((4, 2), ("data", "model"))
    model = ScannedLanguageModel(dims["vocab"], dims["d_model"], dims["heads"], dims["mlp"],
                                 dims["layers"])  # fmt: skip
    optimizer = optax.adamw(LEARNING_RATE, weight_decay=0.01)
    tokens = RandomArrays(seed=23).integers(dims["vocab"], (dims["batch"], dims["seq"] + 1))

    def init(tokens):
        params = model.init(jax.random.key(1, impl="rbg"), tokens)["params"]
        return params, optimizer.init(params)

    abstract_params, abstract_opt_state = jax.eval_shape(init, tokens[:, :-1])
    # The optimizer's moments are boxed like the parameters they follow.
    specs = nn.get_partition_spec((abstract_params, abstract_opt_state))
    state_shardings = nn.logical_to_mesh_sharding(specs, mesh, RULES)
    params, opt_state = nn.meta.unbox(
        jax.jit(init, out_shardings=state_shardings)(tokens[:, :-1])
    )
    param_shardings, opt_shardings = state_shardings
    token_sharding = NamedSharding(mesh, P("data"))
    return Program(
        name=NAME,
        description=f"flax.linen LM, {dims['layers']} blocks in nn.scan over nn.remat, "
        "value_and_grad + optax.adamw",
        fun=make_train_step(model, optimizer),
        args=(params, opt_state, place(tokens, token_sharding)),
        in_shardings=(param_shardings, opt_shardings, token_sharding),
        out_shardings=(param_shardings, opt_shardings, NamedSharding(mesh, P())),
        mesh=mesh,
        mesh_context=True,
    )
