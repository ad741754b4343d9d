"""optimistix's Levenberg-Marquardt curve fits and Newton root finds, batched.

``optx.least_squares(residuals, optx.LevenbergMarquardt(rtol, atol), y0, args,
max_steps, throw=False)`` fits ``a * exp(-b t) + c`` to each noisy curve of a
batch split eight ways (``jax.vmap`` of the solve: a while loop whose linear
solves are lineax's), returning the parameters and each solve's result code;
``optx.root_find`` with ``optx.Newton`` solves a small nonlinear system per row.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import optimistix as optx
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from bench.models.program import Program, RandomArrays, check_size, make_mesh

NAME = "optimistix_lm_fit"
SIZES = {"small": dict(curves=16, points=12), "large": dict(curves=512, points=64)}


def residuals(theta, data):
    t, y = data
    a, b, c = theta
    return a * jnp.exp(-b * t) + c - y


def fit(y, t):
    solver = optx.LevenbergMarquardt(rtol=1e-6, atol=1e-6)
    sol = optx.least_squares(
        residuals, solver, jnp.array([1.0, 0.5, 0.0]), args=(t, y), max_steps=64, throw=False
    )
    return sol.value, sol.result._value


def root(c):
    fn = lambda x, c: jnp.stack([x[0] ** 3 + x[1] - c, x[1] ** 3 - x[0] + 0.5 * c])
    sol = optx.root_find(
        fn,
        optx.Newton(rtol=1e-6, atol=1e-6),
        jnp.array([0.5, 0.5]),
        args=c,
        max_steps=32,
        throw=False,
    )
    return sol.value


def make(size="small"):
    check_size(size)
    dims = SIZES[size]
    mesh = make_mesh((8,), ("data",))
    rand = RandomArrays(seed=111)
    t = jnp.linspace(0.0, 3.0, dims["points"])
    true = jnp.stack(
        [
            1.0 + 0.2 * rand.normal((dims["curves"],)),
            0.8 + 0.1 * rand.normal((dims["curves"],)),
            0.1 * rand.normal((dims["curves"],)),
        ],
        1,
    )
    ys = (
        true[:, :1] * jnp.exp(-true[:, 1:2] * t)
        + true[:, 2:]
        + 0.01 * rand.normal((dims["curves"], dims["points"]))
    )
    batch = NamedSharding(mesh, P("data"))
    replicated = NamedSharding(mesh, P())
    ys = jax.device_put(ys, batch)
    t = jax.device_put(t, replicated)
    cs = jax.device_put(rand.normal((dims["curves"],)), batch)

    def step(ys, t, cs):
        theta, codes = jax.vmap(fit, in_axes=(0, None))(ys, t)
        return theta, codes, jax.vmap(root)(cs)

    return Program(
        name=NAME,
        description="optimistix LevenbergMarquardt least_squares + Newton root_find, vmapped over a batch on 8",
        fun=step,
        args=(ys, t, cs),
        in_shardings=(batch, replicated, batch),
        out_shardings=(batch, batch, batch),
        mesh=mesh,
    )
