"""A GPipe-style pipeline: ``shard_map`` stages passing microbatches with ``ppermute``.

On a (stage, data) mesh each ``stage`` device group holds one layer's weight.
Inside ``shard_map`` the microbatches flow forward one stage per tick
(collective-permute); the last stage's results are broadcast with a ``psum``.
Around the ``shard_map`` sit ordinary ops (an input projection, the reshape
into microbatches, an output projection) for the partitioner to place.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax import lax
from jax.sharding import Mesh
from jax.sharding import PartitionSpec as P

from bench.models.program import Program, RandomArrays, check_size, make_mesh, place, shardings

NAME = "shard_map_pipeline"
SIZES = {
    "small": dict(batch=32, features=32, microbatches=4),
    "large": dict(batch=512, features=512, microbatches=16),
}
STAGES = 4
PARAM_SPECS = {"w_in": P(), "stages": P("stage"), "w_out": P()}


def run_stages(stage_weight: jax.Array, micro: jax.Array) -> jax.Array:
    """Per device: ``stage_weight`` (1, F, F) is this stage's; ``micro`` (M, local batch, F)."""
    stage = lax.axis_index("stage")
    is_first, is_last = stage == 0, stage == STAGES - 1
    count = micro.shape[0]
    state = jnp.zeros_like(micro[0])
    outputs = jnp.zeros_like(micro)
    ticks = count + STAGES - 1
    for tick in range(ticks):
        feed = micro[tick] if tick < count else jnp.zeros_like(micro[0])
        out = jnp.tanh(jnp.where(is_first, feed, state) @ stage_weight[0])
        finished = tick - (STAGES - 1)  # the microbatch leaving the last stage now
        if finished >= 0:
            outputs = outputs.at[finished].set(jnp.where(is_last, out, outputs[finished]))
        if tick < ticks - 1:
            state = lax.ppermute(out, "stage", [(i, i + 1) for i in range(STAGES - 1)])
    # Only the last stage holds results: summing over stages broadcasts them.
    return lax.psum(jnp.where(is_last, outputs, 0.0), "stage")


def pipeline(params: dict, x: jax.Array, mesh: Mesh, microbatches: int) -> jax.Array:
    batch, features = x.shape
    h = jnp.tanh(x @ params["w_in"])
    # Row r = j * microbatches + m goes to microbatch m: the `data` split of the
    # batch stays a split of each microbatch (dimension 1).
    micro = h.reshape(batch // microbatches, microbatches, features).swapaxes(0, 1)
    staged = jax.shard_map(
        run_stages, mesh=mesh,
        in_specs=(P("stage"), P(None, "data")), out_specs=P(None, "data"),
    )(params["stages"], micro)  # fmt: skip
    return staged.swapaxes(0, 1).reshape(batch, features) @ params["w_out"]


def make(size: str = "small") -> Program:
    check_size(size)
    dims = SIZES[size]
    mesh = make_mesh((STAGES, 2), ("stage", "data"))
    rand = RandomArrays(seed=9)
    features = dims["features"]
    params = {
        "w_in": rand.weight((features, features)),
        "stages": rand.normal((STAGES, features, features), features**-0.5),
        "w_out": rand.weight((features, features)),
    }
    x = rand.normal((dims["batch"], features))
    in_shardings = shardings(mesh, (PARAM_SPECS, P("data")))
    return Program(
        name=NAME,
        description=f"{STAGES}-stage shard_map pipeline, ppermute between stages, psum out",
        fun=functools.partial(pipeline, mesh=mesh, microbatches=dims["microbatches"]),
        args=place((params, x), in_shardings),
        in_shardings=in_shardings,
        out_shardings=shardings(mesh, P("data")),
        mesh=mesh,
    )
