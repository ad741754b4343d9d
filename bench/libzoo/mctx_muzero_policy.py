"""MuZero search with mctx, the way mctx's README drives it, and the policy distilled from it.

A representation net embeds a batch of observations into the root (``mctx.RootFnOutput``:
prior logits, value, embedding); ``mctx.muzero_policy`` runs its simulations (a ``fori_loop``
of selection by a ``while_loop`` down the tree, expansion by the user's ``recurrent_fn`` and
backward value updates into the tree's arrays) with Dirichlet noise at the root; the
``recurrent_fn`` is a learned MLP dynamics (reward, discount, prior logits, value). The search's
``action_weights`` are then the target of the prediction net's cross entropy, whose gradients
the step returns with the chosen actions and the root values. The roots split eight ways over
``data``, the nets' weights replicated.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import mctx
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from bench.models.program import Program, RandomArrays, check_size, make_mesh

NAME = "mctx_muzero_policy"
SIZES = {
    "small": dict(batch=16, obs=12, hidden=16, actions=5, simulations=8),
    "large": dict(batch=256, obs=64, hidden=128, actions=18, simulations=32),
}


def make(size: str = "small") -> Program:
    check_size(size)
    dims = SIZES[size]
    mesh = make_mesh((8,), ("data",))
    rand = RandomArrays(seed=1601)
    obs, hidden, actions = dims["obs"], dims["hidden"], dims["actions"]
    replicated, rows = NamedSharding(mesh, P()), NamedSharding(mesh, P("data"))
    params = jax.device_put({
        "repr": rand.weight((obs, hidden)), "dynamics": rand.weight((hidden + actions, hidden)),
        "reward": rand.weight((hidden, 1)), "policy": rand.weight((hidden, actions)),
        "value": rand.weight((hidden, 1)),
    }, replicated)  # fmt: skip
    observations = jax.device_put(rand.normal((dims["batch"], obs)), rows)
    key = jax.device_put(jax.random.key_data(jax.random.key(3)), replicated)

    def recurrent_fn(params, rng_key, action, embedding):
        moved = jnp.concatenate([embedding, jax.nn.one_hot(action, actions)], -1)
        h = jnp.tanh(moved @ params["dynamics"])
        output = mctx.RecurrentFnOutput(
            reward=(h @ params["reward"])[:, 0],
            discount=jnp.full(action.shape, 0.99),
            prior_logits=h @ params["policy"],
            value=(h @ params["value"])[:, 0],
        )
        return output, h

    def step(params, observations, key):
        embedding = jnp.tanh(observations @ params["repr"])
        root = mctx.RootFnOutput(
            prior_logits=embedding @ params["policy"],
            value=(embedding @ params["value"])[:, 0],
            embedding=embedding,
        )
        policy = mctx.muzero_policy(
            params, jax.random.wrap_key_data(key), root, recurrent_fn,
            num_simulations=dims["simulations"], dirichlet_fraction=0.25, temperature=1.0,
        )  # fmt: skip
        target = jax.lax.stop_gradient(policy.action_weights)

        def distillation(p):
            logits = jnp.tanh(observations @ p["repr"]) @ p["policy"]
            return -jnp.mean(jnp.sum(target * jax.nn.log_softmax(logits), -1))

        loss, grads = jax.value_and_grad(distillation)(params)
        return policy.action, policy.search_tree.node_values[:, 0], loss, grads

    return Program(
        name=NAME,
        description="mctx muzero_policy over an MLP recurrent_fn, policy distillation grads, 8",
        fun=step,
        args=(params, observations, key),
        in_shardings=(replicated, rows, replicated),
        out_shardings=(rows, rows, replicated, replicated),
        mesh=mesh,
    )
