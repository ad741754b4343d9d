"""A residual stack of the mismatched MLP of ``conflict_mlp``: one conflict per layer.

Every block sees the same choice as ``conflict_mlp`` (batch-sharded
activations, both weights output-sharded on the one axis), so Shardy gathers
a weight in every layer. With enough layers the module is past the size where
``propagation="cost-aware"`` re-propagates the whole module per candidate:
its candidates are priced on regions around each conflict and one region
evaluation serves every layer (``compiler/cost_aware/regions.py``), which is
what this program exercises.
"""

from __future__ import annotations

import jax
from jax.sharding import PartitionSpec as P

from bench.models.program import Program, RandomArrays, check_size, make_mesh, place, shardings

NAME = "conflict_mlp_deep"
SIZES = {
    "small": dict(layers=48, batch=32, d_model=64, d_hidden=256),
    "large": dict(layers=96, batch=128, d_model=512, d_hidden=2048),
}


def residual_stack(x: jax.Array, weights: list[tuple[jax.Array, jax.Array]]) -> jax.Array:
    for w_in, w_out in weights:
        x = x + jax.nn.relu(x @ w_in) @ w_out
    return x


def make(size: str = "small") -> Program:
    check_size(size)
    dims = SIZES[size]
    mesh = make_mesh((8,), ("x",))
    rand = RandomArrays(seed=23)
    x = rand.normal((dims["batch"], dims["d_model"]))
    weights = [(rand.weight((dims["d_model"], dims["d_hidden"])),
                rand.weight((dims["d_hidden"], dims["d_model"])))
               for _ in range(dims["layers"])]
    out_sharded = shardings(mesh, P(None, "x"))
    in_shardings = (shardings(mesh, P("x", None)), [(out_sharded, out_sharded)] * dims["layers"])
    return Program(
        name=NAME,
        description=f"{dims['layers']} residual mismatched-MLP blocks (one conflict each)",
        fun=residual_stack,
        args=place((x, weights), in_shardings),
        in_shardings=in_shardings,
        out_shardings=shardings(mesh, P("x", None)),
        mesh=mesh,
    )
