"""lineax's conjugate gradients on a batch of systems, and a Cholesky least squares.

``lx.linear_solve(lx.MatrixLinearOperator(a, lx.positive_semidefinite_tag), b,
lx.CG(rtol, atol, max_steps), throw=False)`` vmapped over a batch of symmetric
positive definite systems split over ``data``; the gradient of the solutions'
squared norm with respect to the right-hand sides (lineax's implicit adjoint:
another CG solve); and the normal equations of a tall matrix whose rows are
split over ``model`` solved by ``lx.Cholesky``, with the residual's norm.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import lineax as lx
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from bench.models.program import Program, RandomArrays, check_size, make_mesh

NAME = "lineax_cg_batched"
SIZES = {
    "small": dict(systems=8, n=8, rows=32, cols=8),
    "large": dict(systems=64, n=64, rows=1024, cols=64),
}


def cg_solve(a, b):
    op = lx.MatrixLinearOperator(a, lx.positive_semidefinite_tag)
    return lx.linear_solve(op, b, lx.CG(rtol=1e-6, atol=1e-6, max_steps=64), throw=False).value


def make(size="small"):
    check_size(size)
    dims = SIZES[size]
    mesh = make_mesh((4, 2), ("data", "model"))
    rand = RandomArrays(seed=110)
    n = dims["n"]
    m = rand.normal((dims["systems"], n, n))
    spd = m @ m.transpose(0, 2, 1) / n + 2.0 * jnp.eye(n)
    systems = NamedSharding(mesh, P("data"))
    rows = NamedSharding(mesh, P("model"))
    a = jax.device_put(jnp.asarray(spd, jnp.float32), systems)
    b = jax.device_put(rand.normal((dims["systems"], n)), systems)
    tall = jax.device_put(rand.normal((dims["rows"], dims["cols"])), rows)
    rhs = jax.device_put(rand.normal((dims["rows"],)), rows)

    def step(a, b, tall, rhs):
        xs = jax.vmap(cg_solve)(a, b)
        grad_b = jax.grad(lambda b: jnp.sum(jax.vmap(cg_solve)(a, b) ** 2))(b)
        normal = lx.MatrixLinearOperator(tall.T @ tall, lx.positive_semidefinite_tag)
        coef = lx.linear_solve(normal, tall.T @ rhs, lx.Cholesky()).value
        return xs, grad_b, coef, jnp.linalg.norm(tall @ coef - rhs)

    replicated = NamedSharding(mesh, P())
    return Program(
        name=NAME,
        description="lineax CG on vmapped SPD systems (data), grad through CG, Cholesky normal equations on row-sharded tall matrix",
        fun=step,
        args=(a, b, tall, rhs),
        in_shardings=(systems, systems, rows, rows),
        out_shardings=(systems, systems, replicated, replicated),
        mesh=mesh,
    )
