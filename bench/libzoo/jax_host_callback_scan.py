"""jax's own extension points in one step: ``shard_map``, ``custom_vjp``, a host callback.

Layers stacked on a leading axis run under ``lax.scan`` with ``jax.checkpoint``
around the layer (recomputed in the backward pass); each layer's input passes
through a ``jax.custom_vjp`` identity that clips its cotangent. A
``jax.shard_map`` normalises each row with a ``psum`` over ``model``, and the
step ends with a ``jax.pure_callback`` to NumPy on the host, whose result XLA
keeps on one device (a maximal sharding). Weights are split over ``model``,
the batch over ``data``.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from bench.models.program import Program, RandomArrays, check_size, make_mesh, place

NAME = "jax_host_callback_scan"
SIZES = {
    "small": dict(batch=16, features=32, layers=3),
    "large": dict(batch=256, features=1024, layers=8),
}
LEARNING_RATE = 0.1


@jax.custom_vjp
def clip_gradient(x):
    return x


def _clip_forward(x):
    return x, None


def _clip_backward(_, cotangent):
    return (jnp.clip(cotangent, -0.1, 0.1),)


clip_gradient.defvjp(_clip_forward, _clip_backward)


def host_tanh(h: np.ndarray) -> np.ndarray:
    return np.asarray(np.tanh(h), dtype=h.dtype)


def make_step(mesh):
    @functools.partial(jax.shard_map, mesh=mesh, in_specs=(P("data", "model"),),
                       out_specs=P("data", None))  # fmt: skip
    def row_norm(h):
        squares = jax.lax.psum(jnp.sum(h * h, axis=1, keepdims=True), "model")
        return jnp.broadcast_to(jnp.sqrt(squares), (h.shape[0], 1))

    def forward(weights, x):
        @jax.checkpoint
        def layer(h, w):
            return jax.nn.relu(clip_gradient(h) @ w), None

        h, _ = jax.lax.scan(layer, x, weights)
        return h / (row_norm(h) + 1e-3)

    def step(weights, x):
        loss, grads = jax.value_and_grad(lambda w: jnp.mean(forward(w, x) ** 2))(weights)
        h = forward(weights, x)
        squashed = jax.pure_callback(host_tanh, jax.ShapeDtypeStruct(h.shape, h.dtype), h)
        return weights - LEARNING_RATE * grads, loss, squashed

    return step


def make(size: str = "small") -> Program:
    check_size(size)
    dims = SIZES[size]
    mesh = make_mesh((4, 2), ("data", "model"))
    rand = RandomArrays(seed=53)
    features = dims["features"]
    weight_sharding = NamedSharding(mesh, P(None, None, "model"))
    batch_sharding = NamedSharding(mesh, P("data"))
    args = place((rand.weight((dims["layers"], features, features)),
                  rand.normal((dims["batch"], features))),
                 (weight_sharding, batch_sharding))  # fmt: skip
    return Program(
        name=NAME,
        description=f"{dims['layers']} layers under lax.scan + jax.checkpoint, custom_vjp,"
        " shard_map psum, pure_callback (a result on one device)",
        fun=make_step(mesh),
        args=args,
        in_shardings=(weight_sharding, batch_sharding),
        out_shardings=None,
        mesh=mesh,
    )
