"""Differentiation through control flow: loops, a reverse scan, custom_vjp, checkpoint.

One loss built from five pieces, each a way users differentiate through
structured code, on a (data, fsdp, model) mesh of 2 x 2 x 2:

* ``lax.fori_loop`` with a static trip count (lowered as a scan, so
  reverse-mode works) applying a recurrent weight;
* ``lax.scan(..., reverse=True)`` over a sequence (a backward RNN);
* a ``jax.custom_vjp`` dense layer whose backward pass is written by hand;
* an MLP under ``jax.checkpoint`` with ``jax.checkpoint_policies.dots_saveable``
  (matmul results saved, the rest recomputed);
* ``lax.while_loop`` with a data-dependent trip count, which reverse mode cannot
  differentiate: it is differentiated forward, by ``jax.jvp``.

The step returns the loss, the gradient of every weight (``jax.value_and_grad``)
and the while loop's output and tangent.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax
from jax.sharding import PartitionSpec as P

from bench.models.program import Program, RandomArrays, check_size, make_mesh, place, shardings

NAME = "grad_loops"
SIZES = {
    "small": dict(batch=16, features=32, hidden=64, steps=3, seq=4),
    "large": dict(batch=256, features=512, hidden=2048, steps=8, seq=16),
}
PARAM_SPECS = {
    "w_rec": P("fsdp", "model"),
    "w_scan": P("fsdp", "model"),
    "w_custom": P("fsdp", "model"),
    "w_up": P("fsdp", "model"),
    "w_down": P("model", "fsdp"),
}


@jax.custom_vjp
def dense_tanh(x: jax.Array, w: jax.Array) -> jax.Array:
    return jnp.tanh(x @ w)


def dense_tanh_fwd(x, w):
    y = jnp.tanh(x @ w)
    return y, (x, w, y)


def dense_tanh_bwd(residuals, cotangent):
    x, w, y = residuals
    pre = cotangent * (1 - y * y)
    return pre @ w.T, x.T @ pre


dense_tanh.defvjp(dense_tanh_fwd, dense_tanh_bwd)



checkpointed_mlp = jax.checkpoint(
    lambda params, x: jax.nn.gelu(x @ params["w_up"]) @ params["w_down"],
    policy=jax.checkpoint_policies.dots_saveable,
)


def loss(params: dict, x: jax.Array, xs: jax.Array, steps: int, unroll: int = 1) -> jax.Array:
    # fori_loop with static bounds: reverse-differentiable.
    h = lax.fori_loop(0, steps, lambda i, h: jnp.tanh(h @ params["w_rec"]) + x, x, unroll=unroll)

    # A backward-in-time RNN over xs (seq, batch, features).
    def cell(carry, x_t):
        carry = jnp.tanh(carry @ params["w_scan"] + x_t)
        return carry, carry.sum(axis=-1)

    last, per_step = lax.scan(cell, h, xs, reverse=True, unroll=unroll)
    y = dense_tanh(last, params["w_custom"])
    y = y + checkpointed_mlp(params, y)
    return jnp.mean(y**2) + 0.01 * jnp.mean(per_step**2)


def newton_sqrt(a: jax.Array) -> jax.Array:
    """Elementwise sqrt by Newton steps until all converge (a data-dependent loop)."""

    def cond(state):
        i, z, previous = state
        return (i < 50) & (jnp.max(jnp.abs(z - previous)) > 1e-6)

    def body(state):
        i, z, _ = state
        return i + 1, 0.5 * (z + a / z), z

    _, z, _ = lax.while_loop(cond, body, (0, a + 1.0, jnp.zeros_like(a)))
    return z


def step(params: dict, x: jax.Array, xs: jax.Array, steps: int, unroll: int = 1):
    value, grads = jax.value_and_grad(loss)(params, x, xs, steps, unroll)
    # Reverse mode cannot go through while_loop: push a tangent forward instead.
    roots, tangents = jax.jvp(newton_sqrt, (x * x + 1.0,), (jnp.ones_like(x),))
    return value, grads, roots, tangents


def build(size: str, name: str, unroll: int) -> Program:
    """The program at ``size`` with its ``fori_loop`` and ``scan`` unrolled ``unroll`` times
    per iteration (``grad_loops_unrolled`` builds it with 2)."""
    check_size(size)
    dims = SIZES[size]
    mesh = make_mesh((2, 2, 2), ("data", "fsdp", "model"))
    rand = RandomArrays(seed=31)
    features, hidden = dims["features"], dims["hidden"]
    params = {
        "w_rec": rand.weight((features, features)),
        "w_scan": rand.weight((features, features)),
        "w_custom": rand.weight((features, features)),
        "w_up": rand.weight((features, hidden)),
        "w_down": rand.weight((hidden, features)),
    }
    x = rand.normal((dims["batch"], features))
    xs = rand.normal((dims["seq"], dims["batch"], features), 0.5)
    in_shardings = shardings(mesh, (PARAM_SPECS, P("data"), P(None, "data")))
    steps = dims["steps"]

    def grad_loops(params, x, xs):
        return step(params, x, xs, steps, unroll)

    unrolled = f", loops unrolled x{unroll}" if unroll > 1 else ""
    return Program(
        name=name,
        description="grad through fori_loop, reverse scan, custom_vjp, checkpoint(dots_saveable);"
        f" jvp through while_loop{unrolled}; (2,2,2) mesh",
        fun=grad_loops,
        args=place((params, x, xs), in_shardings),
        in_shardings=in_shardings,
        out_shardings=None,
        mesh=mesh,
    )


def make(size: str = "small") -> Program:
    return build(size, NAME, unroll=1)
