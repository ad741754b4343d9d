"""A mixture-of-experts train step: top-2 router, capacity, dispatch/combine einsums.

GShard / Switch style, on a (data, expert, model) mesh of 2 x 2 x 2: tokens
come in groups split over ``data``; the router's softmax picks each token's
top two experts with ``lax.top_k``; a token's slot in an expert's buffer is a
running count (cumsum, first choices before second ones) and tokens past the
capacity are dropped. Dispatch and combine are one-hot einsums (no scatter);
the experts' weights are split over ``expert`` (which expert) and ``model``
(hidden units), and the dispatched tokens are constrained to the expert split
(the all-to-all of expert parallelism). The loss adds the Switch
load-balancing term; the step returns it and the SGD-updated parameters.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from bench.models.program import Program, RandomArrays, check_size, make_mesh, place, shardings

NAME = "moe"
SIZES = {
    "small": dict(groups=4, group_size=16, features=16, hidden=32, experts=4),
    "large": dict(groups=16, group_size=256, features=256, hidden=1024, experts=8),
}
TOP_K = 2
CAPACITY_FACTOR = 1.5
AUX_WEIGHT = 0.01
LEARNING_RATE = 0.1
PARAM_SPECS = {
    "router": P(),
    "w_in": P("expert", None, "model"),
    "w_out": P("expert", "model", None),
}


def moe_layer(params: dict, x: jax.Array, mesh: Mesh) -> tuple[jax.Array, jax.Array]:
    """``x`` (groups, tokens, features) -> (same shape, load-balancing loss)."""
    groups, tokens, _ = x.shape
    experts = params["router"].shape[1]
    capacity = int(CAPACITY_FACTOR * TOP_K * tokens / experts)

    probs = jax.nn.softmax(jnp.einsum("gsd,de->gse", x, params["router"]), axis=-1)
    gates, chosen = lax.top_k(probs, TOP_K)  # (g, s, k)
    gates = gates / gates.sum(axis=-1, keepdims=True)
    expert_mask = jax.nn.one_hot(chosen, experts, dtype=x.dtype)  # (g, s, k, e)
    # Priority: every token's first choice before any second choice.
    by_choice = expert_mask.transpose(0, 2, 1, 3).reshape(groups, TOP_K * tokens, experts)
    position = (jnp.cumsum(by_choice, axis=1) - 1) * by_choice
    position = position.reshape(groups, TOP_K, tokens, experts).transpose(0, 2, 1, 3)
    kept = expert_mask * (position < capacity)
    slot = jnp.sum(position * kept, axis=-1).astype(jnp.int32)  # (g, s, k)
    slot_mask = jax.nn.one_hot(slot, capacity, dtype=x.dtype)  # (g, s, k, c)
    dispatch = jnp.einsum("gske,gskc->gsec", kept, slot_mask)
    combine = jnp.einsum("gsk,gske,gskc->gsec", gates, kept, slot_mask)

    expert_in = jnp.einsum("gsec,gsd->egcd", dispatch, x)
    expert_in = lax.with_sharding_constraint(
        expert_in, NamedSharding(mesh, P("expert", "data", None, None))
    )
    hidden = jax.nn.gelu(jnp.einsum("egcd,edh->egch", expert_in, params["w_in"]))
    expert_out = jnp.einsum("egch,ehd->egcd", hidden, params["w_out"])
    y = jnp.einsum("gsec,egcd->gsd", combine, expert_out)

    # Switch load balancing: fraction of first choices x mean router probability.
    fraction = expert_mask[:, :, 0, :].mean(axis=(0, 1))
    aux = experts * jnp.sum(fraction * probs.mean(axis=(0, 1)))
    return x + y, aux


def make_train_step(mesh: Mesh):
    def loss_fn(params, x, target):
        y, aux = moe_layer(params, x, mesh)
        return jnp.mean((y - target) ** 2) + AUX_WEIGHT * aux

    def train_step(params: dict, x: jax.Array, target: jax.Array):
        value, grads = jax.value_and_grad(loss_fn)(params, x, target)
        return value, jax.tree.map(lambda p, g: p - LEARNING_RATE * g, params, grads)

    return train_step


def make(size: str = "small") -> Program:
    check_size(size)
    dims = SIZES[size]
    mesh = make_mesh((2, 2, 2), ("data", "expert", "model"))
    rand = RandomArrays(seed=32)
    experts, features, hidden = dims["experts"], dims["features"], dims["hidden"]
    params = {
        "router": rand.weight((features, experts)),
        "w_in": rand.normal((experts, features, hidden), features**-0.5),
        "w_out": rand.normal((experts, hidden, features), hidden**-0.5),
    }
    shape = (dims["groups"], dims["group_size"], features)
    x, target = rand.normal(shape), rand.normal(shape)
    in_shardings = shardings(mesh, (PARAM_SPECS, P("data"), P("data")))
    return Program(
        name=NAME,
        description=f"top-{TOP_K} MoE train step: top_k router, capacity, dispatch/combine "
        "einsums, experts on `expert`; (2,2,2) mesh",
        fun=make_train_step(mesh),
        args=place((params, x, target), in_shardings),
        in_shardings=in_shardings,
        out_shardings=shardings(mesh, (P(), PARAM_SPECS)),
        mesh=mesh,
    )
