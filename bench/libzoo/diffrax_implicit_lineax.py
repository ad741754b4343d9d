"""A stiff reaction ODE solved by diffrax's ``ImplicitEuler`` with a lineax solver, fitted.

A Robertson-like system for a batch of initial conditions, ``ImplicitEuler``
whose root finder is ``optimistix.Newton`` with ``lineax.LU()``, a
``PIDController`` and ``SaveAt(ts=...)`` at fixed times; the rate constants are
fitted to observations by ``jax.value_and_grad`` through the solve (its
``RecursiveCheckpointAdjoint``), the batch sharded over ``data`` of a 4x2 mesh
(``jax.jit`` with ``in_shardings``).
"""

from __future__ import annotations

import diffrax
import jax
import jax.numpy as jnp
import lineax as lx
import optimistix as optx
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from bench.models.program import Program, RandomArrays, check_size, make_mesh

NAME = "diffrax_implicit_lineax"
SIZES = {"small": dict(batch=8, times=5), "large": dict(batch=256, times=20)}


def vector_field(t, y, k):
    k1, k2, k3 = k[0], k[1], k[2]
    a, b, c = y[0], y[1], y[2]
    return jnp.stack([-k1 * a + k3 * b * c, k1 * a - k2 * b**2 - k3 * b * c, k2 * b**2])


def make(size="small"):
    check_size(size)
    d = SIZES[size]
    mesh = make_mesh((4, 2), ("data", "model"))
    rand = RandomArrays(seed=1203)
    y0 = jnp.abs(rand.normal((d["batch"], 3))) + jnp.array([1.0, 0.0, 0.0])
    ts = jnp.linspace(0.0, 1.0, d["times"])
    obs = jnp.abs(rand.normal((d["batch"], d["times"], 3))) * 0.1
    log_k = jnp.log(jnp.array([0.04, 30.0, 1e2]))
    solver = diffrax.ImplicitEuler(
        root_finder=optx.Newton(rtol=1e-5, atol=1e-5, linear_solver=lx.LU())
    )

    def solve(k, y0):
        sol = diffrax.diffeqsolve(
            diffrax.ODETerm(vector_field),
            solver,
            t0=0.0,
            t1=1.0,
            dt0=0.01,
            y0=y0,
            args=k,
            saveat=diffrax.SaveAt(ts=ts),
            stepsize_controller=diffrax.PIDController(rtol=1e-3, atol=1e-6),
            max_steps=256,
        )
        return sol.ys

    def step(log_k, y0, obs):
        def loss(log_k):
            ys = jax.vmap(solve, in_axes=(None, 0))(jnp.exp(log_k), y0)
            return jnp.mean((ys - obs) ** 2)

        l, g = jax.value_and_grad(loss)(log_k)
        return log_k - 0.01 * g, l

    shardings = (
        NamedSharding(mesh, P()),
        NamedSharding(mesh, P("data")),
        NamedSharding(mesh, P("data")),
    )
    args = tuple(jax.device_put(a, s) for a, s in zip((log_k, y0, obs), shardings))
    return Program(
        name=NAME,
        description="diffrax ImplicitEuler(optx.Newton(lineax.LU)) + PID + SaveAt(ts), grad of rates, 4x2",
        fun=step,
        args=args,
        in_shardings=shardings,
        out_shardings=None,
        mesh=mesh,
    )
