"""jaxopt's solvers inside one jitted function, the way jaxopt's examples call them.

An L2-regularised multinomial logistic regression solved by ``jaxopt.LBFGS(fun, maxiter)``
(``solver.run(init, l2, X=..., y=...)``: a ``while_loop`` of two-loop recursions and zoom line
searches), the validation loss's gradient with respect to the regularisation strength through
the solution by jaxopt's implicit differentiation (its ``custom_root``: a linear solve with the
Hessian-vector products of the optimality condition), and a batch of box-constrained quadratic
programs solved by ``jaxopt.ProjectedGradient`` with ``projection_box``, vmapped. The samples and
the problems split eight ways over ``data``.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import jaxopt
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P
from jaxopt.projection import projection_box

from bench.models.program import Program, RandomArrays, check_size, make_mesh

NAME = "jaxopt_lbfgs_logreg"
SIZES = {
    "small": dict(samples=64, features=8, classes=3, iterations=10, problems=8),
    "large": dict(samples=8192, features=256, classes=10, iterations=100, problems=256),
}


def make(size: str = "small") -> Program:
    check_size(size)
    dims = SIZES[size]
    mesh = make_mesh((8,), ("data",))
    rand = RandomArrays(seed=1614)
    features = dims["features"]
    replicated, rows = NamedSharding(mesh, P()), NamedSharding(mesh, P("data"))
    X = jax.device_put(rand.normal((dims["samples"], features)), rows)
    y = jax.device_put(rand.integers(dims["classes"], (dims["samples"],)), rows)
    l2 = jax.device_put(jnp.asarray(0.1), replicated)
    factors = jax.device_put(rand.normal((dims["problems"], features, features)), rows)
    linear = jax.device_put(rand.normal((dims["problems"], features)), rows)

    def objective(W, l2, X, y):
        logits = X @ W
        picked = jnp.take_along_axis(logits, y[:, None], 1)[:, 0]
        return jnp.mean(jax.nn.logsumexp(logits, -1) - picked) + 0.5 * l2 * jnp.sum(W**2)

    solver = jaxopt.LBFGS(fun=objective, maxiter=dims["iterations"], implicit_diff=True)

    def box_qp(factor, b):
        hessian = factor @ factor.T / features + jnp.eye(features)
        qp = jaxopt.ProjectedGradient(
            fun=lambda z: 0.5 * z @ hessian @ z - b @ z, projection=projection_box, maxiter=20
        )
        return qp.run(jnp.zeros(features), hyperparams_proj=(-0.5, 0.5)).params

    def solve(l2, X, y, factors, linear):
        W0 = jnp.zeros((features, dims["classes"]))
        solution = solver.run(W0, l2, X=X, y=y)

        def unregularised_at_solution(l2):
            return objective(solver.run(W0, l2, X=X, y=y).params, 0.0, X, y)

        hypergrad = jax.grad(unregularised_at_solution)(l2)
        return solution.params, solution.state.value, hypergrad, jax.vmap(box_qp)(factors, linear)

    return Program(
        name=NAME,
        description="jaxopt LBFGS logistic regression, implicit-diff hypergradient, vmapped box QPs, 8",
        fun=solve,
        args=(l2, X, y, factors, linear),
        in_shardings=(replicated, rows, rows, rows, rows),
        out_shardings=(replicated, replicated, replicated, rows),
        mesh=mesh,
    )
