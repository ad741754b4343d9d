"""Pose graphs optimised on the SE(3) manifold with jaxlie, the way jaxlie's examples optimise them.

Each graph is a chain of ``jaxlie.SE3`` poses (a pytree of ``wxyz_xyz`` arrays) with noisy
odometry measurements; the cost sums the squared ``log`` of each residual
``m^-1 (a^-1 b)`` plus a prior on the first translation, and a ``lax.fori_loop`` of
steps takes its tangent-space gradient (``jaxlie.manifold.grad``) and retracts along it
(``jaxlie.manifold.rplus``). The graphs are vmapped and split eight ways over ``data``.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import jaxlie
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from bench.models.program import Program, RandomArrays, check_size, make_mesh

NAME = "jaxlie_pose_graph"
SIZES = {"small": dict(graphs=8, poses=12, steps=10), "large": dict(graphs=64, poses=256, steps=50)}


def make(size: str = "small") -> Program:
    check_size(size)
    dims = SIZES[size]
    mesh = make_mesh((8,), ("data",))
    rand = RandomArrays(seed=1701)
    replicated, graphs = NamedSharding(mesh, P()), NamedSharding(mesh, P("data"))
    shape = (dims["graphs"], dims["poses"], 6)
    steps = jaxlie.SE3.exp(jnp.asarray(rand.normal(shape)) * 0.3)
    noise = jaxlie.SE3.exp(jnp.asarray(rand.normal(shape)) * 0.02)
    measured = jaxlie.SE3(jax.vmap(jax.vmap(lambda a, b: (a @ b).wxyz_xyz))(steps, noise))
    initial = jaxlie.SE3.exp(jnp.asarray(rand.normal(shape)) * 0.5)
    initial, measured = jax.device_put((initial, measured), graphs)
    step_size = jax.device_put(jnp.asarray(0.2), replicated)

    def cost(poses, measured):
        first = jax.tree.map(lambda leaf: leaf[:-1], poses)
        second = jax.tree.map(lambda leaf: leaf[1:], poses)
        odometry = jax.tree.map(lambda leaf: leaf[1:], measured)
        residual = jax.vmap(lambda a, b, m: (m.inverse() @ (a.inverse() @ b)).log())(
            first, second, odometry
        )
        return jnp.sum(residual**2) + jnp.sum(poses.translation()[0] ** 2)

    def solve(poses, measured, step_size):
        def one_graph(poses, measured):
            def descend(_, poses):
                tangent = jaxlie.manifold.grad(cost)(poses, measured)
                return jaxlie.manifold.rplus(poses, jax.tree.map(lambda t: -step_size * t, tangent))

            poses = jax.lax.fori_loop(0, dims["steps"], descend, poses)
            return poses, cost(poses, measured)

        poses, final_cost = jax.vmap(one_graph)(poses, measured)
        return poses, final_cost, jnp.mean(final_cost)

    return Program(
        name=NAME,
        description="jaxlie SE3 pose-graph manifold gradient descent, vmapped graphs, 8",
        fun=solve,
        args=(initial, measured, step_size),
        in_shardings=(graphs, graphs, replicated),
        out_shardings=(graphs, graphs, replicated),
        mesh=mesh,
    )
