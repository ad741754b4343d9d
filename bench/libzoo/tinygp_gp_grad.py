"""Gaussian process hyperparameters fitted with tinygp, the way tinygp's tutorials fit them.

A ``tinygp.GaussianProcess`` over a sum kernel (``amplitude * kernels.ExpSquared(scale)`` plus a
``kernels.Matern32``), a diagonal noise and a constant mean, all built from log-parameters;
the negative ``log_probability`` (a Cholesky factor and triangular solves) summed over a batch
of independent datasets by ``jax.vmap``, and its gradient with respect to the log-parameters;
then each dataset's posterior predictive mean and variance at shared test points by
``gp.condition(y, X_test)``. The datasets split eight ways over ``data``.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P
from tinygp import GaussianProcess, kernels

from bench.models.program import Program, RandomArrays, check_size, make_mesh

NAME = "tinygp_gp_grad"
SIZES = {
    "small": dict(datasets=8, points=24, test=10),
    "large": dict(datasets=64, points=512, test=128),
}


def make(size: str = "small") -> Program:
    check_size(size)
    dims = SIZES[size]
    mesh = make_mesh((8,), ("data",))
    rand = RandomArrays(seed=1608)
    replicated, rows = NamedSharding(mesh, P()), NamedSharding(mesh, P("data"))
    theta = jax.device_put({
        "log_amp": np.float32(0.0), "log_scale": np.float32(0.0), "log_matern": np.float32(-1.0),
        "log_diag": np.float32(-2.0), "mean": np.float32(0.0),
    }, replicated)  # fmt: skip
    shape = (dims["datasets"], dims["points"])
    x = np.sort(rand.normal(shape) * 3, -1)
    y = np.sin(x) + 0.1 * rand.normal(shape)
    x, y = jax.device_put((x, y), rows)
    x_test = jax.device_put(np.linspace(-3, 3, dims["test"], dtype=np.float32), replicated)

    def build(theta, x):
        kernel = jnp.exp(theta["log_amp"]) * kernels.ExpSquared(jnp.exp(theta["log_scale"]))
        kernel += jnp.exp(theta["log_matern"]) * kernels.Matern32(1.0)
        return GaussianProcess(kernel, x, diag=jnp.exp(theta["log_diag"]), mean=theta["mean"])

    def step(theta, x, y, x_test):
        def negative_log_likelihood(theta):
            log_probs = jax.vmap(lambda xi, yi: build(theta, xi).log_probability(yi))(x, y)
            return -jnp.sum(log_probs)

        loss, grads = jax.value_and_grad(negative_log_likelihood)(theta)

        def predict(xi, yi):
            _, conditioned = build(theta, xi).condition(yi, x_test)
            return conditioned.loc, conditioned.variance

        mean, variance = jax.vmap(predict)(x, y)
        return loss, grads, mean, variance

    return Program(
        name=NAME,
        description="tinygp GP log_probability grads and condition predictive, vmapped datasets, 8",
        fun=step,
        args=(theta, x, y, x_test),
        in_shardings=(replicated, rows, rows, replicated),
        out_shardings=(replicated, replicated, rows, rows),
        mesh=mesh,
    )
