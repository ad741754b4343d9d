"""A flax linen classifier whose ``nn.Dense`` layers run an injected int8 ``dot_general``.

Linen's ``dot_general`` hook the way quantisation libraries (AQT) use it: each operand is
scaled by its absolute maximum over the contracting dimensions, rounded (a straight-through
``jax.custom_vjp``) and clipped to int8, multiplied by ``lax.dot_general`` with
``preferred_element_type=int32`` and rescaled; a float product of the rounded operands carries
the gradient. The head is an ``nn.Einsum`` (``bd,dkc->bkc``) computing in bfloat16. One
``optax.sgd`` step on the cross-entropy; kernels over ``model``, the batch over ``data`` of a
4x2 mesh.
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from bench.models.program import Program, RandomArrays, check_size, make_mesh

NAME = "linen_int8_dot_general"
SIZES = {
    "small": dict(batch=32, features=64, hidden=128, heads=4, classes=8),
    "large": dict(batch=256, features=512, hidden=2048, heads=8, classes=64),
}


@jax.custom_vjp
def round_through(x):
    return jnp.round(x)


round_through.defvjp(lambda x: (jnp.round(x), None), lambda _, g: (g,))


def quantize(x, axes):
    scale = jnp.max(jnp.abs(x), axis=axes, keepdims=True) / 127.0 + 1e-8
    return jnp.clip(round_through(x / scale), -127, 127), scale


def int8_dot_general(lhs, rhs, dimension_numbers, precision=None, preferred_element_type=None):
    (lhs_contracting, rhs_contracting), _ = dimension_numbers
    q_lhs, s_lhs = quantize(lhs, lhs_contracting)
    q_rhs, s_rhs = quantize(rhs, rhs_contracting)
    exact = jax.lax.dot_general(q_lhs.astype(jnp.int8), q_rhs.astype(jnp.int8),
                                dimension_numbers, preferred_element_type=jnp.int32)  # fmt: skip
    carrier = jax.lax.dot_general(q_lhs, q_rhs, dimension_numbers)
    out = carrier + jax.lax.stop_gradient(exact.astype(carrier.dtype) - carrier)
    s_rhs = jnp.squeeze(s_rhs, rhs_contracting)
    return out * s_lhs * s_rhs.reshape((1,) * (out.ndim - s_rhs.ndim) + s_rhs.shape)


class QuantizedNet(nn.Module):
    hidden: int
    heads: int
    classes: int

    @nn.compact
    def __call__(self, x):
        x = nn.relu(nn.Dense(self.hidden, dot_general=int8_dot_general, name="q1")(x))
        x = nn.relu(nn.Dense(self.hidden, dot_general=int8_dot_general, name="q2")(x))
        head = nn.Einsum((self.hidden, self.heads, self.classes), "bd,dkc->bkc",
                         dtype=jnp.bfloat16, name="head")  # fmt: skip
        return head(x).astype(jnp.float32).mean(axis=1)


def make(size: str = "small") -> Program:
    check_size(size)
    dims = SIZES[size]
    mesh = make_mesh((4, 2), ("data", "model"))
    model = QuantizedNet(dims["hidden"], dims["heads"], dims["classes"])
    params = model.init(jax.random.key(0), jnp.ones((1, dims["features"])))["params"]

    def sharding(*spec):
        return NamedSharding(mesh, P(*spec))

    param_shardings = {
        "q1": {"kernel": sharding(None, "model"), "bias": sharding("model")},
        "q2": {"kernel": sharding("model", None), "bias": sharding()},
        "head": {"kernel": sharding(None, "model", None), "bias": sharding("model", None)},
    }
    params = jax.device_put(params, param_shardings)
    optimizer = optax.sgd(0.01)
    opt_state = jax.device_put(optimizer.init(params), sharding())
    rand = RandomArrays(seed=1405)
    x = jax.device_put(rand.normal((dims["batch"], dims["features"])), sharding("data"))
    labels = jax.device_put(rand.integers(dims["classes"], (dims["batch"],)), sharding("data"))

    def train_step(params, opt_state, x, labels):
        def loss_fn(params):
            logits = model.apply({"params": params}, x)
            return optax.softmax_cross_entropy_with_integer_labels(logits, labels).mean()

        loss, grads = jax.value_and_grad(loss_fn)(params)
        updates, opt_state = optimizer.update(grads, opt_state)
        return optax.apply_updates(params, updates), opt_state, loss

    return Program(
        name=NAME,
        description="linen Dense with an injected int8 dot_general (preferred int32,"
        " straight-through custom_vjp), nn.Einsum bf16 head, sgd, 4x2",
        fun=train_step,
        args=(params, opt_state, x, labels),
        in_shardings=None,
        out_shardings=None,
        mesh=mesh,
    )
