"""A whole training loop in one jitted call, as equinox / optax users write fast loops.

``lax.scan`` runs one optimizer step per batch of a stack of batches (leading
axis: the steps) with ``(params, opt_state)`` as its carry: the arrays of an
equinox model (``eqx.nn.Conv1d``, ``eqx.nn.LayerNorm``, ``eqx.nn.Linear``)
split off by ``eqx.partition(model, eqx.is_array)`` and recombined with the
static rest by ``eqx.combine`` in the body, ``jax.vmap`` over the examples,
``optax.chain(clip_by_global_norm, adabelief)``. The batches are split over
``data`` (each step's slice of the stack), the conv's output channels over
``model``; the carry is donated and each step's loss returned.
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import optax
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from bench.models.program import Program, RandomArrays, check_size, make_mesh, place

NAME = "eqx_scan_train_loop"
SIZES = {
    "small": dict(steps=4, batch=16, channels=3, width=8, length=10),
    "large": dict(steps=16, batch=256, channels=16, width=128, length=64),
}


class Net(eqx.Module):
    conv: eqx.nn.Conv1d
    norm: eqx.nn.LayerNorm
    head: eqx.nn.Linear

    def __init__(self, channels: int, width: int, length: int, key: jax.Array) -> None:
        conv_key, head_key = jax.random.split(key)
        self.conv = eqx.nn.Conv1d(channels, width, kernel_size=3, padding="SAME", key=conv_key)
        self.norm = eqx.nn.LayerNorm((width, length))
        self.head = eqx.nn.Linear(width * length, 2, key=head_key)

    def __call__(self, x: jax.Array) -> jax.Array:
        return self.head(jnp.ravel(self.norm(jax.nn.relu(self.conv(x)))))


def make_train_loop(static, optimizer: optax.GradientTransformation):
    def train(params, opt_state, xs, ys):
        def step(carry, batch):
            params, opt_state = carry
            x, y = batch

            def loss_fn(params):
                model = eqx.combine(params, static)
                return jnp.mean((jax.vmap(model)(x) - y) ** 2)

            loss, grads = jax.value_and_grad(loss_fn)(params)
            updates, opt_state = optimizer.update(grads, opt_state, params)
            return (optax.apply_updates(params, updates), opt_state), loss

        (params, opt_state), losses = jax.lax.scan(step, (params, opt_state), (xs, ys))
        return params, opt_state, losses

    return train


def make(size: str = "small") -> Program:
    check_size(size)
    dims = SIZES[size]
    mesh = make_mesh((4, 2), ("data", "model"))
    rand = RandomArrays(seed=59)
    width = dims["width"]
    params, static = eqx.partition(
        Net(dims["channels"], width, dims["length"], jax.random.key(59)), eqx.is_array)
    # the conv's output channels (its weight's and bias's first axis) over 'model'
    param_shardings = jax.tree.map(
        lambda a: NamedSharding(mesh, P("model") if a.shape[0] == width else P()), params)
    params = jax.device_put(params, param_shardings)
    optimizer = optax.chain(optax.clip_by_global_norm(1.0), optax.adabelief(1e-2))
    opt_state = optimizer.init(params)
    opt_shardings = optax.tree_map_params(
        optimizer, lambda _, sharding: sharding, opt_state, param_shardings,
        transform_non_params=lambda _: NamedSharding(mesh, P()),
        is_leaf=lambda leaf: isinstance(leaf, NamedSharding),
    )  # fmt: skip
    opt_state = jax.device_put(opt_state, opt_shardings)
    batches = NamedSharding(mesh, P(None, "data"))
    xs = rand.normal((dims["steps"], dims["batch"], dims["channels"], dims["length"]))
    ys = rand.normal((dims["steps"], dims["batch"], 2))
    return Program(
        name=NAME,
        description="lax.scan of optax steps over stacked batches, eqx.partition/combine carry "
        "(Conv1d, LayerNorm, Linear), chain(clip, adabelief), donated",
        fun=make_train_loop(static, optimizer),
        args=(params, opt_state, *place((xs, ys), (batches, batches))),
        in_shardings=(param_shardings, opt_shardings, batches, batches),
        out_shardings=(param_shardings, opt_shardings, NamedSharding(mesh, P())),
        mesh=mesh,
        donate_argnums=(0, 1),
    )
