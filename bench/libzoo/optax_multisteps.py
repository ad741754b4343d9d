"""Gradient accumulation with ``optax.MultiSteps`` over a clipped adamw chain.

``optax.MultiSteps(optax.chain(optax.clip_by_global_norm(1.0), optax.adamw(...)),
every_k_schedule=2)``: each call accumulates the gradient and applies the inner
update (zeros in between) every second mini-step, choosing with ``lax.cond``
inside optax. The state (its ``MultiStepsState`` of counters, accumulated
gradient and inner chain state) is placed like the parameters (FSDP over
``data`` x tensor parallel over ``model``), mapped by
``optax.tree_map_params``; the step runs two mini-steps in one jitted call
(the second applies the update) and donates parameters and state.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import optax
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from bench.models.program import Program, RandomArrays, check_size, make_mesh, place, shardings

NAME = "optax_multisteps"
SIZES = {
    "small": dict(batch=16, features=32, hidden=64),
    "large": dict(batch=256, features=512, hidden=2048),
}
PARAM_SPECS = {"w1": P("data", "model"), "b1": P("model"), "w2": P("model", "data"), "b2": P()}
EVERY = 2


def make_optimizer() -> optax.MultiSteps:
    inner = optax.chain(optax.clip_by_global_norm(1.0), optax.adamw(1e-3, weight_decay=0.01))
    return optax.MultiSteps(inner, every_k_schedule=EVERY)


def loss_fn(params, x, y):
    hidden = jax.nn.gelu(x @ params["w1"] + params["b1"])
    return jnp.mean((hidden @ params["w2"] + params["b2"] - y) ** 2)


def make_train_step(optimizer: optax.MultiSteps):
    def mini_step(params, opt_state, x, y):
        loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
        updates, opt_state = optimizer.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    def train_step(params, opt_state, xs, ys):
        losses = []
        for i in range(EVERY):  # mini-batches; the last one applies the update
            params, opt_state, loss = mini_step(params, opt_state, xs[i], ys[i])
            losses.append(loss)
        return params, opt_state, jnp.stack(losses)

    return train_step


def make(size: str = "small") -> Program:
    check_size(size)
    dims = SIZES[size]
    mesh = make_mesh((4, 2), ("data", "model"))
    rand = RandomArrays(seed=47)
    features, hidden = dims["features"], dims["hidden"]
    param_shardings = shardings(mesh, PARAM_SPECS)
    params = place({
        "w1": rand.weight((features, hidden)), "b1": rand.normal((hidden,), 0.1),
        "w2": rand.weight((hidden, features)), "b2": rand.normal((features,), 0.1),
    }, param_shardings)  # fmt: skip
    optimizer = make_optimizer()
    opt_state = optimizer.init(params)
    replicated = NamedSharding(mesh, P())
    opt_shardings = optax.tree_map_params(
        optimizer, lambda _, sharding: sharding, opt_state, param_shardings,
        transform_non_params=lambda _: replicated,
        is_leaf=lambda leaf: isinstance(leaf, NamedSharding),
    )  # fmt: skip
    opt_state = jax.device_put(opt_state, opt_shardings)
    batches = NamedSharding(mesh, P(None, "data"))
    xs = rand.normal((EVERY, dims["batch"], features))
    ys = rand.normal((EVERY, dims["batch"], features))
    return Program(
        name=NAME,
        description="optax.MultiSteps(chain(clip_by_global_norm, adamw), every 2) over two "
        "mini-batches, FSDP x TP state via tree_map_params, donated",
        fun=make_train_step(optimizer),
        args=(params, opt_state, *place((xs, ys), (batches, batches))),
        in_shardings=(param_shardings, opt_shardings, batches, batches),
        out_shardings=(param_shardings, opt_shardings, replicated),
        mesh=mesh,
        donate_argnums=(0, 1),
    )
