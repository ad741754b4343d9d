"""optimistix's Dogleg trust-region least squares, fitting a batch of Gaussian peaks.

``optx.least_squares(residuals, optx.Dogleg(rtol, atol), theta0, args,
max_steps, throw=False)`` fits amplitude, centre, log-width and offset to each
noisy curve; ``jax.vmap`` over the curves, split over ``('data', 'model')``
of a 4x2 mesh. Returns the fitted parameters, each solve's step count and its
residual norm.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import optimistix as optx
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from bench.models.program import Program, RandomArrays, check_size, make_mesh

NAME = "optimistix_dogleg_batched"
SIZES = {"small": dict(batch=16, points=24), "large": dict(batch=512, points=200)}


def residuals(theta, data):
    xs, ys = data
    amp, mu, log_sigma, offset = theta
    return amp * jnp.exp(-0.5 * ((xs - mu) / jnp.exp(log_sigma)) ** 2) + offset - ys


def fit(theta0, xs, ys):
    sol = optx.least_squares(
        residuals,
        optx.Dogleg(rtol=1e-6, atol=1e-6),
        theta0,
        args=(xs, ys),
        max_steps=64,
        throw=False,
    )
    return sol.value, sol.stats["num_steps"], jnp.linalg.norm(residuals(sol.value, (xs, ys)))


def make(size="small"):
    check_size(size)
    d = SIZES[size]
    mesh = make_mesh((4, 2), ("data", "model"))
    rand = RandomArrays(seed=1108)
    xs = jnp.broadcast_to(jnp.linspace(-3, 3, d["points"]), (d["batch"], d["points"]))
    true = jnp.stack(
        [
            1 + 0.2 * jnp.asarray(rand.normal((d["batch"],))),
            0.3 * jnp.asarray(rand.normal((d["batch"],))),
            jnp.zeros(d["batch"]),
            0.1 * jnp.ones(d["batch"]),
        ],
        -1,
    )
    ys = jax.vmap(lambda t, x: residuals(t, (x, 0.0)))(true, xs) + 0.01 * jnp.asarray(
        rand.normal((d["batch"], d["points"]))
    )
    theta0 = jnp.broadcast_to(jnp.array([0.5, 0.0, 0.2, 0.0]), (d["batch"], 4))
    b_sh = NamedSharding(mesh, P(("data", "model")))

    def run(theta0, xs, ys):
        return jax.vmap(fit)(theta0, xs, ys)

    return Program(
        name=NAME,
        description="optimistix Dogleg least_squares, Gaussian peak fits vmapped over ('data','model') 4x2",
        fun=run,
        args=tuple(jax.device_put(a, b_sh) for a in (theta0, xs, ys)),
        in_shardings=(b_sh,) * 3,
        out_shardings=None,
        mesh=mesh,
    )
