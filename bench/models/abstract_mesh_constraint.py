"""Sharding constraints written against an ``AbstractMesh``, compiled for real devices.

The function never names devices: one ``with_sharding_constraint`` takes a
``NamedSharding(abstract_mesh, spec)``, the other a bare ``PartitionSpec``
resolved by ``jax.sharding.use_abstract_mesh``. shardc lowers the program for
the abstract mesh (``Program.lower_on_abstract_mesh``) and compiles that
lowering for the concrete mesh's devices.
"""

from __future__ import annotations

import jax
from jax.sharding import AbstractMesh, NamedSharding
from jax.sharding import PartitionSpec as P

from bench.models.program import Program, RandomArrays, check_size, make_mesh, place, shardings

NAME = "abstract_mesh_constraint"
SIZES = {
    "small": dict(batch=32, features=32, hidden=128),
    "large": dict(batch=1024, features=1024, hidden=4096),
}


def make_constrained_mlp(abstract_mesh: AbstractMesh):
    """The MLP, with its constraints bound to ``abstract_mesh``."""

    def constrained_mlp(params: dict, x: jax.Array) -> jax.Array:
        # Force a 2-D split of the hidden activations (batch x hidden), which
        # the inputs alone (batch split only) would not imply.
        hidden = jax.nn.relu(x @ params["w_in"])
        hidden = jax.lax.with_sharding_constraint(
            hidden, NamedSharding(abstract_mesh, P("data", "model"))
        )
        with jax.sharding.use_abstract_mesh(abstract_mesh):
            out = jax.lax.with_sharding_constraint(hidden @ params["w_out"], P("data", None))
        return out

    return constrained_mlp


def make(size: str = "small") -> Program:
    check_size(size)
    dims = SIZES[size]
    mesh = make_mesh((4, 2), ("data", "model"))
    rand = RandomArrays(seed=10)
    params = {
        "w_in": rand.weight((dims["features"], dims["hidden"])),
        "w_out": rand.weight((dims["hidden"], dims["features"])),
    }
    x = rand.normal((dims["batch"], dims["features"]))
    in_shardings = shardings(mesh, ({"w_in": P(), "w_out": P()}, P("data")))
    return Program(
        name=NAME,
        description="with_sharding_constraint on an AbstractMesh; shardc lowers abstractly",
        fun=make_constrained_mlp(mesh.abstract_mesh),
        args=place((params, x), in_shardings),
        in_shardings=in_shardings,
        out_shardings=shardings(mesh, P("data")),
        mesh=mesh,
        lower_on_abstract_mesh=True,
    )
