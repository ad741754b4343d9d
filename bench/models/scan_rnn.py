"""An Elman RNN over time with ``lax.scan``: the loop body carries a sharded state.

The batch is split over ``data`` and the hidden units over ``model``, so every
step needs the whole previous state for ``h @ w_hidden``: communication inside
the loop. The output shardings are left to the partitioner.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax
from jax.sharding import PartitionSpec as P

from bench.models.program import Program, RandomArrays, check_size, make_mesh, place, shardings

NAME = "scan_rnn"
SIZES = {
    "small": dict(steps=16, batch=16, inputs=16, hidden=32),
    "large": dict(steps=128, batch=128, inputs=256, hidden=512),
}
PARAM_SPECS = {"w_input": P(None, "model"), "w_hidden": P(None, "model"), "bias": P("model")}


def rnn(params: dict, xs: jax.Array, h0: jax.Array):
    def step(h, x):
        h = jnp.tanh(x @ params["w_input"] + h @ params["w_hidden"] + params["bias"])
        return h, h

    final, states = lax.scan(step, h0, xs)
    return final, states.mean(axis=0)


def make(size: str = "small") -> Program:
    check_size(size)
    dims = SIZES[size]
    mesh = make_mesh((4, 2), ("data", "model"))
    rand = RandomArrays(seed=8)
    params = {
        "w_input": rand.weight((dims["inputs"], dims["hidden"])),
        "w_hidden": rand.weight((dims["hidden"], dims["hidden"])),
        "bias": rand.normal((dims["hidden"],), 0.1),
    }
    xs = rand.normal((dims["steps"], dims["batch"], dims["inputs"]))
    h0 = rand.normal((dims["batch"], dims["hidden"]), 0.1)
    in_shardings = shardings(mesh, (PARAM_SPECS, P(None, "data"), P("data", "model")))
    return Program(
        name=NAME,
        description="lax.scan Elman RNN; batch on `data`, hidden units on `model`",
        fun=rnn,
        args=place((params, xs, h0), in_shardings),
        in_shardings=in_shardings,
        out_shardings=None,
        mesh=mesh,
    )
