"""optax's ``adafactor`` under ``apply_if_finite`` on a fully sharded (FSDP) MLP.

``optax.apply_if_finite(optax.adafactor(1e-2, min_dim_size_to_factor=16),
max_consecutive_errors=3)``: adafactor keeps factored second moments (a row
and a column vector) for the matrices and full ones for the biases, clips its
updates by their RMS and scales them by the parameters' RMS; ``apply_if_finite``
skips a step whose update is not finite (``lax.cond`` on a reduction of every
update) and counts the skipped ones. The matrices are split over the one mesh
axis ``fsdp`` (8 devices, the first or the last dimension), the batch too;
adafactor's statistics are kept replicated. Parameters and state are donated.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import optax
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from bench.models.program import Program, RandomArrays, check_size, make_mesh, place, shardings

NAME = "optax_adafactor_fsdp"
SIZES = {"small": dict(batch=16, d=32, hidden=128), "large": dict(batch=256, d=512, hidden=4096)}
SPECS = {"w_in": P("fsdp", None), "b_in": P(), "w_out": P(None, "fsdp"), "b_out": P()}


def loss_fn(params, x, y):
    h = jax.nn.silu(x @ params["w_in"] + params["b_in"])
    return jnp.mean((h @ params["w_out"] + params["b_out"] - y) ** 2)


def make(size="small"):
    check_size(size)
    dims = SIZES[size]
    mesh = make_mesh((8,), ("fsdp",))
    rand = RandomArrays(seed=104)
    pshard = shardings(mesh, SPECS)
    params = place(
        {
            "w_in": rand.weight((dims["d"], dims["hidden"])),
            "b_in": rand.normal((dims["hidden"],), 0.1),
            "w_out": rand.weight((dims["hidden"], dims["d"])),
            "b_out": rand.normal((dims["d"],), 0.1),
        },
        pshard,
    )
    optimizer = optax.apply_if_finite(
        optax.adafactor(learning_rate=1e-2, min_dim_size_to_factor=16), max_consecutive_errors=3
    )
    opt_state = optimizer.init(params)
    replicated = NamedSharding(mesh, P())
    # adafactor's statistics (factored row and column vectors, the biases' full ones) replicated
    opt_shardings = jax.tree.map(lambda a: replicated, opt_state)
    opt_state = jax.device_put(opt_state, opt_shardings)
    batch = NamedSharding(mesh, P("fsdp"))

    def train_step(params, opt_state, x, y):
        loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
        updates, opt_state = optimizer.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    x = rand.normal((dims["batch"], dims["d"]))
    y = rand.normal((dims["batch"], dims["d"]))
    return Program(
        name=NAME,
        description="optax.apply_if_finite(adafactor) on FSDP-8 MLP",
        fun=train_step,
        args=(params, opt_state, *place((x, y), (batch, batch))),
        in_shardings=(pshard, opt_shardings, batch, batch),
        out_shardings=(pshard, opt_shardings, replicated),
        mesh=mesh,
        donate_argnums=(0, 1),
    )
