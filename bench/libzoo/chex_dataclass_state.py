"""A train step over a ``chex.dataclass`` state, checked by chex's static asserts.

The state is a ``@chex.dataclass`` (parameters, ``optax.lamb`` state, step
count, a running loss average): a pytree, so its shardings are the same
dataclass with a ``NamedSharding`` in every field (``jax.tree.map`` over the
state), parameters tensor parallel over ``model``. The step checks what chex
checks at trace time: ``chex.assert_shape`` / ``assert_rank`` of the batch,
``chex.assert_type`` of the step, ``chex.assert_equal_shape`` of the labels and
predictions, ``chex.assert_trees_all_equal_shapes`` of parameters and
gradients, ``chex.assert_shape(loss, ())``; it returns a new state
(``state.replace(...)``) with the state donated.
"""

from __future__ import annotations

import chex
import jax
import jax.numpy as jnp
import optax
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from bench.models.program import Program, RandomArrays, check_size, make_mesh, place, shardings

NAME = "chex_dataclass_state"
SIZES = {
    "small": dict(batch=16, features=32, hidden=64, classes=8),
    "large": dict(batch=256, features=512, hidden=2048, classes=64),
}
PARAM_SPECS = {"w1": P(None, "model"), "b1": P("model"), "w2": P("model", None), "b2": P()}
OPTIMIZER = optax.lamb(1e-3)
DECAY = 0.9


@chex.dataclass
class TrainState:
    params: dict
    opt_state: optax.OptState
    step: chex.Array
    loss_average: chex.Array


def predict(params, x):
    return jax.nn.relu(x @ params["w1"] + params["b1"]) @ params["w2"] + params["b2"]


def make_train_step(batch: int, features: int, classes: int):
    def loss_fn(params, x, labels):
        logits = predict(params, x)
        chex.assert_shape(logits, (batch, classes))
        one_hot = jax.nn.one_hot(labels, classes)
        chex.assert_equal_shape([logits, one_hot])
        return optax.softmax_cross_entropy(logits, one_hot).mean()

    def train_step(state: TrainState, x, labels) -> TrainState:
        chex.assert_shape(x, (batch, features))
        chex.assert_rank(labels, 1)
        chex.assert_type([state.step, labels], int)
        loss, grads = jax.value_and_grad(loss_fn)(state.params, x, labels)
        chex.assert_shape(loss, ())
        chex.assert_trees_all_equal_shapes(state.params, grads)
        updates, opt_state = OPTIMIZER.update(grads, state.opt_state, state.params)
        return state.replace(
            params=optax.apply_updates(state.params, updates), opt_state=opt_state,
            step=state.step + 1, loss_average=DECAY * state.loss_average + (1 - DECAY) * loss,
        )  # fmt: skip

    return train_step


def make(size: str = "small") -> Program:
    check_size(size)
    dims = SIZES[size]
    mesh = make_mesh((4, 2), ("data", "model"))
    rand = RandomArrays(seed=48)
    features, hidden, classes = dims["features"], dims["hidden"], dims["classes"]
    param_shardings = shardings(mesh, PARAM_SPECS)
    params = place({
        "w1": rand.weight((features, hidden)), "b1": rand.normal((hidden,), 0.1),
        "w2": rand.weight((hidden, classes)), "b2": rand.normal((classes,), 0.1),
    }, param_shardings)  # fmt: skip
    replicated = NamedSharding(mesh, P())
    opt_state = OPTIMIZER.init(params)
    opt_shardings = optax.tree_map_params(
        OPTIMIZER, lambda _, sharding: sharding, opt_state, param_shardings,
        transform_non_params=lambda _: replicated,
        is_leaf=lambda leaf: isinstance(leaf, NamedSharding),
    )  # fmt: skip
    state = TrainState(params=params, opt_state=jax.device_put(opt_state, opt_shardings),
                       step=jax.device_put(jnp.zeros((), jnp.int32), replicated),
                       loss_average=jax.device_put(jnp.zeros(()), replicated))  # fmt: skip
    state_shardings = jax.tree.map(lambda leaf: leaf.sharding, state)
    data = NamedSharding(mesh, P("data"))
    x, labels = rand.normal((dims["batch"], features)), rand.integers(classes, (dims["batch"],))
    return Program(
        name=NAME,
        description="chex.dataclass train state (its shardings the same dataclass), "
        "chex.assert_shape/rank/type/equal_shape/trees_all_equal_shapes, optax lamb, donated",
        fun=make_train_step(dims["batch"], features, classes),
        args=(state, *place((x, labels), (data, data))),
        in_shardings=(state_shardings, data, data),
        out_shardings=state_shardings,
        mesh=mesh,
        donate_argnums=(0,),
    )
