"""diffrax solving many Lotka-Volterra systems at once, with forward-mode sensitivities.

Diffrax's "solve many ODEs" pattern: ``jax.vmap`` of ``diffeqsolve`` (``Dopri5``,
a ``PIDController`` adaptive step, ``SaveAt(ts=...)``) over a batch of
predator-prey parameters and initial populations split over ``("data",
"model")`` of a 2x2x2 (data, fsdp, model) mesh; the step returns the saved
trajectories and the Jacobian of the final prey count with respect to the four
parameters (``jax.jacfwd`` through ``diffrax.ForwardMode``).
"""

from __future__ import annotations

import diffrax
import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import PartitionSpec as P

from bench.models.program import Program, RandomArrays, check_size, make_mesh, place, shardings

NAME = "diffrax_lotka_volterra"
SIZES = {
    "small": dict(batch=16, times=8, max_steps=64),
    "large": dict(batch=1024, times=64, max_steps=512),
}
RATES = np.array([0.1, 0.02, 0.4, 0.02], np.float32)  # alpha, beta, gamma, delta


def vector_field(t, y, args):
    prey, predator = y
    alpha, beta, gamma, delta = args
    return jnp.stack([
        alpha * prey - beta * prey * predator, -gamma * predator + delta * prey * predator,
    ])  # fmt: skip


def solve(args, y0, ts, max_steps, adjoint=diffrax.RecursiveCheckpointAdjoint()):
    solution = diffrax.diffeqsolve(
        diffrax.ODETerm(vector_field), diffrax.Dopri5(), t0=ts[0], t1=ts[-1], dt0=0.05, y0=y0,
        args=args, saveat=diffrax.SaveAt(ts=ts), max_steps=max_steps,
        stepsize_controller=diffrax.PIDController(rtol=1e-5, atol=1e-5), adjoint=adjoint,
    )  # fmt: skip
    return solution.ys


def make_step(max_steps: int):
    def step(args, y0, ts):
        trajectories = jax.vmap(lambda a, y: solve(a, y, ts, max_steps))(args, y0)

        def final_prey(a, y):
            return solve(a, y, ts, max_steps, diffrax.ForwardMode())[-1, 0]

        return trajectories, jax.vmap(jax.jacfwd(final_prey))(args, y0)

    return step


def make(size: str = "small") -> Program:
    check_size(size)
    dims = SIZES[size]
    mesh = make_mesh((2, 2, 2), ("data", "fsdp", "model"))
    rand = RandomArrays(seed=208)
    args = ((1.0 + 0.1 * rand.normal((dims["batch"], 4))) * RATES).astype(np.float32)
    y0 = (10.0 + rand.normal((dims["batch"], 2))).astype(np.float32)
    ts = np.linspace(0.0, 5.0, dims["times"], dtype=np.float32)
    batch = P(("data", "model"))
    in_shardings = shardings(mesh, (batch, batch, P()))
    return Program(
        name=NAME,
        description="diffrax Lotka-Volterra vmapped over a batch on ('data', 'model') of 2x2x2: "
        "Dopri5, PIDController, SaveAt(ts), jacfwd through ForwardMode",
        fun=make_step(dims["max_steps"]),
        args=place((args, y0, ts), in_shardings),
        in_shardings=in_shardings,
        out_shardings=None,
        mesh=mesh,
    )
