"""Mixture-of-experts layer: top-1 routing with capacity, scatter dispatch, gather combine.

Tokens are split over ``data`` and experts over ``expert``. The router picks
one expert per token; each token's slot in its expert's buffer is a running
count (cumsum) of the tokens routed there before it, and tokens past the
capacity are dropped. Dispatch is a scatter-add into an (experts, capacity,
features) buffer, combine a gather back to token order, scaled by the gate.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec as P

from bench.models.program import Program, RandomArrays, check_size, make_mesh, place, shardings

NAME = "moe_routing"
SIZES = {
    "small": dict(tokens=64, features=32, hidden=64, experts=8),
    "large": dict(tokens=2048, features=512, hidden=1024, experts=16),
}
CAPACITY_FACTOR = 2
PARAM_SPECS = {"router": P(), "w_in": P("expert"), "w_out": P("expert")}


def moe_layer(params: dict, x: jax.Array) -> jax.Array:
    tokens = x.shape[0]
    experts = params["router"].shape[1]
    capacity = CAPACITY_FACTOR * tokens // experts

    logits = x @ params["router"]
    expert = jnp.argmax(logits, axis=-1)
    gate = jnp.take_along_axis(jax.nn.softmax(logits), expert[:, None], axis=1)[:, 0]
    routed = jax.nn.one_hot(expert, experts, dtype=jnp.int32)
    slot = jnp.sum((jnp.cumsum(routed, axis=0) - 1) * routed, axis=1)
    # Overflowing tokens get the out-of-range slot `capacity`: dropped by the
    # scatter, read back as zeros by the gather.
    slot = jnp.where(slot < capacity, slot, capacity)

    buffer = jnp.zeros((experts, capacity, x.shape[1]), x.dtype)
    dispatched = buffer.at[expert, slot].add(x, mode="drop")
    hidden = jax.nn.gelu(jnp.einsum("ecd,edf->ecf", dispatched, params["w_in"]))
    processed = jnp.einsum("ecf,efd->ecd", hidden, params["w_out"])
    combined = processed.at[expert, slot].get(mode="fill", fill_value=0)
    return x + gate[:, None] * combined


def make(size: str = "small") -> Program:
    check_size(size)
    dims = SIZES[size]
    mesh = make_mesh((2, 4), ("data", "expert"))
    rand = RandomArrays(seed=7)
    experts, features, hidden = dims["experts"], dims["features"], dims["hidden"]
    params = {
        "router": rand.weight((features, experts)),
        "w_in": rand.normal((experts, features, hidden), features**-0.5),
        "w_out": rand.normal((experts, hidden, features), hidden**-0.5),
    }
    x = rand.normal((dims["tokens"], features))
    in_shardings = shardings(mesh, (PARAM_SPECS, P("data")))
    return Program(
        name=NAME,
        description="top-1 MoE: cumsum slots, scatter-add dispatch, gather combine",
        fun=moe_layer,
        args=place((params, x), in_shardings),
        in_shardings=in_shardings,
        out_shardings=shardings(mesh, P("data")),
        mesh=mesh,
    )
