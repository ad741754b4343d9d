"""optax's Lion with masked decoupled weight decay and an EMA of the parameters.

``optax.chain(clip_by_global_norm(1.0), scale_by_lion(), masked(add_decayed_weights(0.1),
mask), scale_by_learning_rate(linear_schedule(...)))``: the mask function
(``tree_map_with_path``) decays the kernels only, never the biases or the
layer norm's scale; the step also keeps an exponential moving average of the
parameters with ``optax.incremental_update`` and returns the loss and the
gradients' norm (``optax.tree.norm``). A pre-norm residual MLP on a 2x2x2 mesh
(``data``, ``fsdp``, ``model``): kernels FSDP over ``fsdp`` and tensor parallel
over ``model``, the optimizer state placed like them by ``optax.tree_map_params``,
the batch over ``data`` x ``fsdp``; parameters, EMA and state donated.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import optax
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from bench.models.program import Program, RandomArrays, check_size, make_mesh, place, shardings

NAME = "optax_lion_masked_ema"
SIZES = {"small": dict(batch=16, d=32, hidden=64), "large": dict(batch=256, d=512, hidden=2048)}
SPECS = {
    "ln": {"scale": P(), "bias": P()},
    "up": {"kernel": P("fsdp", "model"), "bias": P("model")},
    "down": {"kernel": P("model", "fsdp"), "bias": P()},
}


def forward(params, x):
    mean = x.mean(-1, keepdims=True)
    var = x.var(-1, keepdims=True)
    h = (x - mean) * jax.lax.rsqrt(var + 1e-6) * params["ln"]["scale"] + params["ln"]["bias"]
    h = jax.nn.gelu(h @ params["up"]["kernel"] + params["up"]["bias"])
    return x + h @ params["down"]["kernel"] + params["down"]["bias"]


def decay_mask(params):
    return jax.tree_util.tree_map_with_path(lambda path, _: path[-1].key == "kernel", params)


def make(size="small"):
    check_size(size)
    dims = SIZES[size]
    mesh = make_mesh((2, 2, 2), ("data", "fsdp", "model"))
    rand = RandomArrays(seed=105)
    d, hdim = dims["d"], dims["hidden"]
    pshard = shardings(mesh, SPECS)
    params = place(
        {
            "ln": {"scale": 1 + rand.normal((d,), 0.1), "bias": rand.normal((d,), 0.1)},
            "up": {"kernel": rand.weight((d, hdim)), "bias": rand.normal((hdim,), 0.1)},
            "down": {"kernel": rand.weight((hdim, d)), "bias": rand.normal((d,), 0.1)},
        },
        pshard,
    )
    schedule = optax.linear_schedule(0.0, 3e-4, transition_steps=4)
    optimizer = optax.chain(
        optax.clip_by_global_norm(1.0),
        optax.scale_by_lion(b1=0.9, b2=0.99),
        optax.masked(optax.add_decayed_weights(0.1), decay_mask),
        optax.scale_by_learning_rate(schedule),
    )
    opt_state = optimizer.init(params)
    replicated = NamedSharding(mesh, P())
    opt_shardings = optax.tree_map_params(
        optimizer,
        lambda _, s: s,
        opt_state,
        pshard,
        transform_non_params=lambda _: replicated,
        is_leaf=lambda l: isinstance(l, NamedSharding),
    )
    opt_state = jax.device_put(opt_state, opt_shardings)
    ema = jax.device_put(jax.tree.map(lambda a: a.copy(), params), pshard)
    batch = NamedSharding(mesh, P(("data", "fsdp")))

    def train_step(params, ema, opt_state, x):
        def loss_fn(p):
            return jnp.mean((forward(p, x) - x) ** 2)

        loss, grads = jax.value_and_grad(loss_fn)(params)
        updates, opt_state = optimizer.update(grads, opt_state, params)
        params = optax.apply_updates(params, updates)
        ema = optax.incremental_update(params, ema, step_size=0.01)
        return params, ema, opt_state, {"loss": loss, "grad_norm": optax.tree.norm(grads)}

    x = rand.normal((dims["batch"], d))
    return Program(
        name=NAME,
        description="clip + lion + masked decayed weights + linear schedule, EMA params via incremental_update, 2x2x2",
        fun=train_step,
        args=(params, ema, opt_state, jax.device_put(x, batch)),
        in_shardings=(pshard, pshard, opt_shardings, batch),
        out_shardings=(pshard, pshard, opt_shardings, replicated),
        mesh=mesh,
        donate_argnums=(0, 1, 2),
    )
