"""optax's lookahead over an injected-hyperparameter chain, as optax's docs compose them.

``optax.lookahead(optax.chain(optax.clip_by_global_norm(1.0),
optax.inject_hyperparams(optax.adamw)(learning_rate=warmup_cosine, ...)),
sync_period=2, slow_step_size=0.5)``: the parameters are
``optax.LookaheadParams`` (fast and slow copies, both placed FSDP over
``data`` x tensor parallel over ``model``), the learning rate is a schedule
evaluated from the injected state's count (its hyperparameters live in the
state, replicated) and every second step syncs the slow weights
(``jnp.where`` on the step). The step runs three updates in one jitted call,
reading the injected learning rate back from the state as users log it, and
donates parameters and state.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import optax
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from bench.models.program import Program, RandomArrays, check_size, make_mesh, place, shardings

NAME = "optax_lookahead_inject"
SIZES = {
    "small": dict(batch=16, features=32, hidden=64),
    "large": dict(batch=256, features=512, hidden=2048),
}
PARAM_SPECS = {"w1": P("data", "model"), "b1": P("model"), "w2": P("model", "data"), "b2": P()}
STEPS = 3


def make_optimizer() -> optax.GradientTransformation:
    schedule = optax.warmup_cosine_decay_schedule(0.0, 1e-2, warmup_steps=2, decay_steps=20)
    inner = optax.chain(
        optax.clip_by_global_norm(1.0),
        optax.inject_hyperparams(optax.adamw)(learning_rate=schedule, weight_decay=1e-4),
    )  # fmt: skip
    return optax.lookahead(inner, sync_period=2, slow_step_size=0.5)


def loss_fn(params, x, y):
    hidden = jax.nn.gelu(x @ params["w1"] + params["b1"])
    return jnp.mean((hidden @ params["w2"] + params["b2"] - y) ** 2)


def make_train_step(optimizer):
    def train_step(params: optax.LookaheadParams, opt_state, x, y):
        losses, rates = [], []
        for _ in range(STEPS):
            loss, grads = jax.value_and_grad(loss_fn)(params.fast, x, y)
            updates, opt_state = optimizer.update(grads, opt_state, params)
            params = optax.apply_updates(params, updates)
            losses.append(loss)
            rates.append(opt_state.fast_state[1].hyperparams["learning_rate"])
        return params, opt_state, jnp.stack(losses), jnp.stack(rates)

    return train_step


def make(size: str = "small") -> Program:
    check_size(size)
    dims = SIZES[size]
    mesh = make_mesh((4, 2), ("data", "model"))
    rand = RandomArrays(seed=67)
    features, hidden = dims["features"], dims["hidden"]
    param_shardings = shardings(mesh, PARAM_SPECS)
    fast = place({
        "w1": rand.weight((features, hidden)), "b1": rand.normal((hidden,), 0.1),
        "w2": rand.weight((hidden, features)), "b2": rand.normal((features,), 0.1),
    }, param_shardings)  # fmt: skip
    params = optax.LookaheadParams.init_synced(fast)
    params_shardings = optax.LookaheadParams(param_shardings, param_shardings)
    optimizer = make_optimizer()
    opt_state = optimizer.init(params)
    replicated = NamedSharding(mesh, P())
    opt_shardings = optax.tree_map_params(
        optimizer, lambda _, sharding: sharding, opt_state, params_shardings.fast,
        transform_non_params=lambda _: replicated,
        is_leaf=lambda leaf: isinstance(leaf, NamedSharding),
    )  # fmt: skip
    opt_state = jax.device_put(opt_state, opt_shardings)
    batch = NamedSharding(mesh, P("data"))
    x, y = place((rand.normal((dims["batch"], features)),
                  rand.normal((dims["batch"], features))), (batch, batch))  # fmt: skip
    return Program(
        name=NAME,
        description="optax.lookahead(chain(clip_by_global_norm, inject_hyperparams(adamw) "
        "with a warmup-cosine schedule)), LookaheadParams FSDP x TP, 3 steps, donated",
        fun=make_train_step(optimizer),
        args=(params, opt_state, x, y),
        in_shardings=(params_shardings, opt_shardings, batch, batch),
        out_shardings=(params_shardings, opt_shardings, replicated, replicated),
        mesh=mesh,
        donate_argnums=(0, 1),
    )
