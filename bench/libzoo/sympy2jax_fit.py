"""The constants of sympy expressions fitted with sympy2jax, the way its README fits them.

``sympy2jax.SymbolicModule`` turns two sympy expressions (``1.5 cos(x) + 0.5 y^2`` and
``exp(-0.3 x) sin(2 y) + 0.1``) into an equinox module whose float constants are trainable
leaves; ``eqx.partition`` splits them from the module's static structure, and a ``lax.scan`` of
optax adam steps (``eqx.filter_value_and_grad`` of the mean squared error) fits them to data,
the parameters and optimiser state donated. The samples split four ways over ``data``; the two
expressions' targets over ``model``.
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax
import sympy
import sympy2jax
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from bench.models.program import Program, RandomArrays, check_size, make_mesh

NAME = "sympy2jax_fit"
SIZES = {"small": dict(samples=64, steps=20), "large": dict(samples=4096, steps=200)}


def make(size: str = "small") -> Program:
    check_size(size)
    dims = SIZES[size]
    mesh = make_mesh((4, 2), ("data", "model"))
    rand = RandomArrays(seed=1704)
    replicated, rows = NamedSharding(mesh, P()), NamedSharding(mesh, P("data"))
    rows_by_expression = NamedSharding(mesh, P("data", "model"))
    x, y = sympy.symbols("x y")
    module = sympy2jax.SymbolicModule([
        1.5 * sympy.cos(x) + 0.5 * y**2,
        sympy.exp(-0.3 * x) * sympy.sin(2.0 * y) + 0.1,
    ])  # fmt: skip
    params, static = eqx.partition(module, eqx.is_inexact_array)
    optimizer = optax.adam(3e-2)
    params, opt_state = jax.device_put((params, optimizer.init(params)), replicated)
    xs, ys = rand.normal((dims["samples"],)), rand.normal((dims["samples"],))
    target = np.stack(
        [2.0 * np.cos(xs) + 0.3 * ys**2, np.exp(-0.5 * xs) * np.sin(1.5 * ys) + 0.2], -1
    )
    xs, ys = jax.device_put((xs, ys), rows)
    target = jax.device_put(target.astype(np.float32), rows_by_expression)

    def fit(params, opt_state, xs, ys, target):
        def loss(params):
            predicted = jnp.stack(eqx.combine(params, static)(x=xs, y=ys), -1)
            return jnp.mean((predicted - target) ** 2)

        def step(carry, _):
            params, opt_state = carry
            value, grads = eqx.filter_value_and_grad(loss)(params)
            updates, opt_state = optimizer.update(grads, opt_state, params)
            return (eqx.apply_updates(params, updates), opt_state), value

        (params, opt_state), losses = jax.lax.scan(
            step, (params, opt_state), None, length=dims["steps"]
        )
        return params, opt_state, losses

    return Program(
        name=NAME,
        description="sympy2jax SymbolicModule constants fitted by adam in lax.scan, donated, 4x2",
        fun=fit,
        args=(params, opt_state, xs, ys, target),
        in_shardings=(replicated, replicated, rows, rows, rows_by_expression),
        out_shardings=(replicated, replicated, replicated),
        donate_argnums=(0, 1),
        mesh=mesh,
    )
