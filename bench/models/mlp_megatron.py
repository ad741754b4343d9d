"""Megatron MLP: column-parallel then row-parallel matmul on a (data, model) mesh.

The hidden dimension is split over ``model``, so the only communication the
forward pass needs is one all-reduce of the second matmul's partial sums.
"""

from __future__ import annotations

import jax
from jax.sharding import PartitionSpec as P

from bench.models.program import Program, RandomArrays, check_size, make_mesh, place, shardings

NAME = "mlp_megatron"
SIZES = {
    "small": dict(batch=32, d_model=64, d_hidden=256),
    "large": dict(batch=512, d_model=1024, d_hidden=4096),
}


def megatron_mlp(params: dict, x: jax.Array) -> jax.Array:
    hidden = jax.nn.gelu(x @ params["w_in"] + params["b_in"])
    return hidden @ params["w_out"] + params["b_out"]


def make(size: str = "small") -> Program:
    check_size(size)
    dims = SIZES[size]
    mesh = make_mesh((4, 2), ("data", "model"))
    rand = RandomArrays(seed=2)
    params = {
        "w_in": rand.weight((dims["d_model"], dims["d_hidden"])),
        "b_in": rand.normal((dims["d_hidden"],), 0.1),
        "w_out": rand.weight((dims["d_hidden"], dims["d_model"])),
        "b_out": rand.normal((dims["d_model"],), 0.1),
    }
    x = rand.normal((dims["batch"], dims["d_model"]))
    param_specs = {
        "w_in": P(None, "model"),  # column-parallel
        "b_in": P("model"),
        "w_out": P("model", None),  # row-parallel: partial sums over `model`
        "b_out": P(),
    }
    in_shardings = shardings(mesh, (param_specs, P("data", None)))
    return Program(
        name=NAME,
        description="column- then row-parallel MLP on a 4x2 (data, model) mesh",
        fun=megatron_mlp,
        args=place((params, x), in_shardings),
        in_shardings=in_shardings,
        out_shardings=shardings(mesh, P("data", None)),
        mesh=mesh,
    )
