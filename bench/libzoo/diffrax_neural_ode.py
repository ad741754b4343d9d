"""A neural ODE in diffrax: the loss of a trajectory fit and its gradient.

The vector field is a two-layer tanh MLP on a parameter dict (``args`` of the
``diffrax.ODETerm``, as in diffrax's getting-started examples); the state is a
batch of initial conditions ``y0`` of shape (batch, features), split over
``data``, integrated together by ``diffrax.diffeqsolve`` with ``Tsit5``, an
adaptive ``PIDController`` step and ``SaveAt(ts=...)`` at a few times. The
step returns the mean squared distance to a target trajectory and its
gradient with respect to the parameters (``jax.value_and_grad`` through
diffrax's default ``RecursiveCheckpointAdjoint``: its checkpointed while loop
with ``max_steps``).
"""

from __future__ import annotations

import diffrax
import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec as P

from bench.models.program import Program, RandomArrays, check_size, make_mesh, place, shardings

NAME = "diffrax_neural_ode"
SIZES = {
    "small": dict(batch=8, features=4, hidden=16, times=5, max_steps=64),
    "large": dict(batch=256, features=32, hidden=256, times=16, max_steps=256),
}
PARAM_SPECS = {"w1": P(None, "model"), "b1": P("model"), "w2": P("model", None), "b2": P()}


def vector_field(t, y, params):
    hidden = jnp.tanh(y @ params["w1"] + params["b1"])
    return jnp.tanh(hidden @ params["w2"] + params["b2"])


def solve(params, y0, ts, max_steps: int):
    solution = diffrax.diffeqsolve(
        diffrax.ODETerm(vector_field), diffrax.Tsit5(), t0=ts[0], t1=ts[-1], dt0=0.1, y0=y0,
        args=params, saveat=diffrax.SaveAt(ts=ts),
        stepsize_controller=diffrax.PIDController(rtol=1e-4, atol=1e-6), max_steps=max_steps,
    )  # fmt: skip
    return solution.ys  # (times, batch, features)


def make_step(max_steps: int):
    def loss(params, y0, ts, target):
        return jnp.mean((solve(params, y0, ts, max_steps) - target) ** 2)

    def step(params, y0, ts, target):
        return jax.value_and_grad(loss)(params, y0, ts, target)

    return step


def make(size: str = "small") -> Program:
    check_size(size)
    dims = SIZES[size]
    mesh = make_mesh((4, 2), ("data", "model"))
    rand = RandomArrays(seed=43)
    features, hidden = dims["features"], dims["hidden"]
    params = {
        "w1": rand.weight((features, hidden)), "b1": rand.normal((hidden,), 0.1),
        "w2": rand.weight((hidden, features)), "b2": rand.normal((features,), 0.1),
    }  # fmt: skip
    y0 = rand.normal((dims["batch"], features))
    ts = jnp.linspace(0.0, 1.0, dims["times"]).__array__()
    target = rand.normal((dims["times"], dims["batch"], features), 0.5)
    in_shardings = shardings(mesh, (PARAM_SPECS, P("data"), P(), P(None, "data")))
    return Program(
        name=NAME,
        description="diffrax neural ODE: Tsit5, PIDController, SaveAt(ts), batch state on "
        "data; value_and_grad through RecursiveCheckpointAdjoint",
        fun=make_step(dims["max_steps"]),
        args=place((params, y0, ts, target), in_shardings),
        in_shardings=in_shardings,
        out_shardings=None,
        mesh=mesh,
    )
