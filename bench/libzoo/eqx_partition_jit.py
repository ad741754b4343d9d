"""An equinox model split by ``eqx.partition`` and stepped under plain ``jax.jit``.

The other way equinox's users jit (its "jax.jit vs filter_jit" FAQ): split the
model once with ``eqx.partition(model, eqx.is_array)`` into its arrays (``None``
where a leaf is static: activation functions, sizes) and the static rest, jit
a step over the arrays that rebuilds the model with ``eqx.combine``, and give
``in_shardings`` / ``out_shardings`` as trees of the same shape as the arrays,
``None`` where they are ``None``. The model is an ``eqx.nn.MLP`` with a
``LayerNorm`` in front, tensor parallel over ``model`` (first layer split along
its outputs, last along its inputs), trained by ``optax.adam`` with the
parameters and the optimizer state donated; the batch is split over ``data``.
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import optax
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from bench.models.program import Program, RandomArrays, check_size, make_mesh, place

NAME = "eqx_partition_jit"
SIZES = {
    "small": dict(batch=16, features=32, hidden=64, depth=3),
    "large": dict(batch=256, features=512, hidden=2048, depth=4),
}
LEARNING_RATE = 1e-3


class Regressor(eqx.Module):
    norm: eqx.nn.LayerNorm
    mlp: eqx.nn.MLP

    def __init__(self, features: int, hidden: int, depth: int, *, key: jax.Array):
        self.norm = eqx.nn.LayerNorm(features)
        self.mlp = eqx.nn.MLP(features, features, hidden, depth, activation=jax.nn.gelu,
                              key=key)  # fmt: skip

    def __call__(self, x: jax.Array) -> jax.Array:
        return self.mlp(self.norm(x))


def param_specs(params: Regressor) -> Regressor:
    """Megatron-style: the first layer split along its outputs, the last along its
    inputs, the middle layers alternating; vectors replicated. ``None`` leaves of
    ``params`` (static in the model) stay ``None``."""
    layers = params.mlp.layers
    specs = jax.tree.map(lambda leaf: P(), params)
    for i, layer in enumerate(layers):
        split_outputs = i % 2 == 0 and i < len(layers) - 1
        weight = P("model", None) if split_outputs else P(None, "model")
        bias = P("model") if split_outputs else P()
        specs = eqx.tree_at(lambda t, i=i: (t.mlp.layers[i].weight, t.mlp.layers[i].bias), specs,
                            (weight, bias))  # fmt: skip
    return specs


def make_train_step(static: Regressor, optimizer: optax.GradientTransformation):
    def loss_fn(params, x, y):
        model = eqx.combine(params, static)
        return jnp.mean((jax.vmap(model)(x) - y) ** 2)

    def train_step(params, opt_state, x, y):
        loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
        updates, opt_state = optimizer.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    return train_step


def make(size: str = "small") -> Program:
    check_size(size)
    dims = SIZES[size]
    mesh = make_mesh((4, 2), ("data", "model"))
    model = Regressor(dims["features"], dims["hidden"], dims["depth"], key=jax.random.key(1))
    params, static = eqx.partition(model, eqx.is_array)
    param_shardings = jax.tree.map(lambda spec: NamedSharding(mesh, spec), param_specs(params),
                                   is_leaf=lambda leaf: isinstance(leaf, P))  # fmt: skip
    params = jax.device_put(params, param_shardings)
    optimizer = optax.adam(LEARNING_RATE)
    # The optimizer state placed as the parameters are (its step counter replicated).
    opt_state = optimizer.init(params)
    opt_shardings = optax.tree_map_params(
        optimizer, lambda _, sharding: sharding, opt_state, param_shardings,
        transform_non_params=lambda _: NamedSharding(mesh, P()),
    )  # fmt: skip
    opt_state = jax.device_put(opt_state, opt_shardings)
    rand = RandomArrays(seed=42)
    data = NamedSharding(mesh, P("data"))
    x, y = rand.normal((dims["batch"], dims["features"])), rand.normal((dims["batch"],
                                                                         dims["features"]))
    in_shardings = (param_shardings, opt_shardings, data, data)
    return Program(
        name=NAME,
        description="equinox MLP split by eqx.partition (None leaves), jax.jit over its arrays "
        "with in/out_shardings trees holding None, eqx.combine inside, optax adam, donated",
        fun=make_train_step(static, optimizer),
        args=(params, opt_state, *place((x, y), (data, data))),
        in_shardings=in_shardings,
        out_shardings=(param_shardings, opt_shardings, NamedSharding(mesh, P())),
        mesh=mesh,
        donate_argnums=(0, 1),
    )
