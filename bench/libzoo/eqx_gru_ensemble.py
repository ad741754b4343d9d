"""An ensemble of equinox GRU classifiers trained at once by ``eqx.filter_vmap``.

Each member is an ``eqx.Module`` (an ``eqx.nn.GRUCell`` run over the sequence by
``lax.scan``, ``eqx.nn.Dropout``, an ``eqx.nn.Linear`` head, its hidden size a
``field(static=True)``); ``eqx.filter_vmap`` over a split key builds the members, and the
step updates them all with ``eqx.filter_vmap(in_axes=(eqx.if_array(0), eqx.if_array(0), None,
None, 0))`` over models, ``optax.adam`` states and dropout keys while the batch is shared.
``eqx.error_if`` guards each member's loss; ``eqx.nn.inference_mode`` switches the dropouts
off for the ensemble's evaluation in the same step. ``eqx.filter_jit(donate=
'all-except-first')``; members over ``ensemble`` (2), the batch over ``data`` (4).
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

NAME = "eqx_gru_ensemble"
SIZES = {
    "small": dict(members=4, batch=16, seq=10, features=8, hidden=32, classes=3),
    "large": dict(members=8, batch=128, seq=64, features=32, hidden=256, classes=10),
}


class GRUClassifier(eqx.Module):
    cell: eqx.nn.GRUCell
    dropout: eqx.nn.Dropout
    head: eqx.nn.Linear
    hidden: int = eqx.field(static=True)

    def __init__(self, features: int, hidden: int, classes: int, key: jax.Array):
        cell_key, head_key = jax.random.split(key)
        self.cell = eqx.nn.GRUCell(features, hidden, key=cell_key)
        self.dropout = eqx.nn.Dropout(0.2)
        self.head = eqx.nn.Linear(hidden, classes, key=head_key)
        self.hidden = hidden

    def __call__(self, xs: jax.Array, key: jax.Array | None) -> jax.Array:  # xs: (seq, features)
        def step(h, x):
            return self.cell(x, h), None

        h, _ = jax.lax.scan(step, jnp.zeros((self.hidden,)), xs)
        return self.head(self.dropout(h, key=key))


def member_loss(model, x, y, key):
    logits = jax.vmap(model)(x, jax.random.split(key, x.shape[0]))
    return optax.softmax_cross_entropy_with_integer_labels(logits, y).mean()


def make(size: str = "small") -> Program:
    check_size(size)
    dims = SIZES[size]
    mesh = make_mesh((2, 4), ("ensemble", "data"))
    members = NamedSharding(mesh, P("ensemble"))

    def shard_members(tree):
        return eqx.filter_shard(tree, jax.tree.map(lambda _: members, eqx.filter(tree, eqx.is_array)))

    keys = jax.random.split(jax.random.key(0), dims["members"])
    models = eqx.filter_vmap(
        lambda key: GRUClassifier(dims["features"], dims["hidden"], dims["classes"], key))(keys)
    optimizer = optax.adam(1e-2)
    opt_states = eqx.filter_vmap(lambda model: optimizer.init(eqx.filter(model, eqx.is_array)))(models)
    models, opt_states = shard_members(models), shard_members(opt_states)
    rand = RandomArrays(seed=1408)
    batch = NamedSharding(mesh, P("data"))
    x = jax.device_put(rand.normal((dims["batch"], dims["seq"], dims["features"])), batch)
    y = jax.device_put(rand.integers(dims["classes"], (dims["batch"],)), batch)
    key = jax.device_put(jax.random.key(5), NamedSharding(mesh, P()))

    def train_step(models, opt_states, x, y, key):
        @eqx.filter_vmap(in_axes=(eqx.if_array(0), eqx.if_array(0), None, None, 0))
        def update(model, opt_state, x, y, key):
            loss, grads = eqx.filter_value_and_grad(member_loss)(model, x, y, key)
            loss = eqx.error_if(loss, ~jnp.isfinite(loss), "non-finite loss")
            updates, opt_state = optimizer.update(grads, opt_state, eqx.filter(model, eqx.is_array))
            return eqx.apply_updates(model, updates), opt_state, loss

        models, opt_states, losses = update(models, opt_states, x, y,
                                            jax.random.split(key, dims["members"]))  # fmt: skip
        evaluated = eqx.nn.inference_mode(models)
        logits = eqx.filter_vmap(lambda model: jax.vmap(model, in_axes=(0, None))(x, None))(evaluated)
        accuracy = jnp.mean(jnp.argmax(logits.mean(0), -1) == y)
        return models, opt_states, losses, accuracy

    def jit(jit_function, fun):
        return filter_jit(jit_function, fun, donate="all-except-first")

    return Program(
        name=NAME,
        description="equinox GRUCell classifiers, an ensemble by filter_vmap(in_axes=if_array),"
        " error_if, inference_mode evaluation, adam, filter_jit donated, 2x4",
        fun=train_step,
        args=(models, opt_states, x, y, key),
        in_shardings=None,
        out_shardings=None,
        mesh=mesh,
        donate_argnums=(1, 2, 3, 4),
        jit=jit,
    )
