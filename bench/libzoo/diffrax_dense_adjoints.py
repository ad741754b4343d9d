"""diffrax's dense output, backsolve adjoint and a stiff implicit solve, on a sharded batch.

Three solves as diffrax's documentation writes them, each ``jax.vmap``-ed over
a batch of initial conditions split over ``data``: a ``Tsit5`` solve with an
adaptive ``PIDController`` step and ``SaveAt(dense=True)``, whose
interpolation is read at query times by ``sol.evaluate`` and
``sol.derivative``; the gradient of a ``Dopri5`` solve's final state with
respect to the vector field's parameters through ``BacksolveAdjoint`` (the
adjoint ODE solved backwards in time); and the stiff Robertson chemical
kinetics solved by the implicit ``Kvaerno3`` (Newton iterations with a
lineax LU solve inside the adaptive while loop), its rate constants batched.
diffrax checks its solves with ``eqx.error_if``: host callbacks in the
failing branches of ``lax.cond``.
"""

from __future__ import annotations

import diffrax
import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec as P

from bench.models.program import Program, RandomArrays, check_size, make_mesh, place, shardings

NAME = "diffrax_dense_adjoints"
SIZES = {
    "small": dict(batch=8, features=4, queries=5, max_steps=64),
    "large": dict(batch=256, features=32, queries=32, max_steps=256),
}
TOLERANCES = dict(rtol=1e-5, atol=1e-5)


def vector_field(t, y, args):
    weight, bias = args
    return jnp.tanh(y @ weight + bias) - 0.1 * y


def dense_solution(y0, args, queries: int, max_steps: int):
    solution = diffrax.diffeqsolve(
        diffrax.ODETerm(vector_field), diffrax.Tsit5(), 0.0, 1.0, 0.1, y0, args=args,
        saveat=diffrax.SaveAt(dense=True), max_steps=max_steps,
        stepsize_controller=diffrax.PIDController(**TOLERANCES))  # fmt: skip
    ts = jnp.linspace(0.0, 1.0, queries)
    return jax.vmap(solution.evaluate)(ts), jax.vmap(solution.derivative)(ts)


def final_energy(args, y0, max_steps: int):
    solution = diffrax.diffeqsolve(
        diffrax.ODETerm(vector_field), diffrax.Dopri5(), 0.0, 1.0, 0.1, y0, args=args,
        adjoint=diffrax.BacksolveAdjoint(), max_steps=max_steps,
        stepsize_controller=diffrax.PIDController(**TOLERANCES))  # fmt: skip
    return jnp.sum(solution.ys[-1] ** 2)


def robertson(t, y, rates):
    k1, k2, k3 = rates
    y1, y2, y3 = y
    return jnp.stack([-k1 * y1 + k3 * y2 * y3, k1 * y1 - k2 * y2**2 - k3 * y2 * y3, k2 * y2**2])


def stiff_solution(y0, rates, max_steps: int):
    solution = diffrax.diffeqsolve(
        diffrax.ODETerm(robertson), diffrax.Kvaerno3(), 0.0, 10.0, 1e-3, y0, args=rates,
        saveat=diffrax.SaveAt(ts=jnp.array([1.0, 10.0])), max_steps=max_steps,
        stepsize_controller=diffrax.PIDController(rtol=1e-4, atol=1e-6))  # fmt: skip
    return solution.ys


def make_step(queries: int, max_steps: int):
    def step(y0, args, chemistry, rates):
        values, derivatives = jax.vmap(dense_solution, in_axes=(0, None, None, None))(
            y0, args, queries, max_steps)
        energy = lambda a: jnp.mean(jax.vmap(final_energy, in_axes=(None, 0, None))(  # noqa: E731
            a, y0, max_steps))
        grads = jax.grad(energy)(args)
        stiff = jax.vmap(stiff_solution, in_axes=(0, 0, None))(chemistry, rates, max_steps)
        return values, derivatives, grads, stiff

    return step


def make(size: str = "small") -> Program:
    check_size(size)
    dims = SIZES[size]
    batch, features = dims["batch"], dims["features"]
    mesh = make_mesh((4, 2), ("data", "model"))
    rand = RandomArrays(seed=71)
    args = (rand.normal((features, features), 0.5), rand.normal((features,), 0.1))
    chemistry = jnp.tile(jnp.array([1.0, 0.0, 0.0]), (batch, 1)).__array__()
    rates = (jnp.full(batch, 0.04).__array__(),
             (3e7 * jnp.linspace(0.5, 1.0, batch)).__array__(),
             jnp.full(batch, 1e4).__array__())  # fmt: skip
    in_shardings = shardings(mesh, (P("data"), (P(), P()), P("data"), (P("data"),) * 3))
    return Program(
        name=NAME,
        description="diffrax: SaveAt(dense=True) + evaluate/derivative, grad through "
        "BacksolveAdjoint, stiff Kvaerno3 with batched rates; batch over data",
        fun=make_step(dims["queries"], dims["max_steps"]),
        args=place((rand.normal((batch, features)), args, chemistry, rates), in_shardings),
        in_shardings=in_shardings,
        out_shardings=None,
        mesh=mesh,
    )
