"""A PPO update of an actor-critic in ``chex.dataclass`` state, as chex users write RL code.

The train state and the rollout are ``chex.dataclass(mappable_dataclass=False)``
trees (``state.replace`` returns the next one) and the step asserts shapes with
``chex.assert_rank`` / ``chex.assert_shape``. Advantages come from generalised
advantage estimation, a reverse ``lax.scan`` over a time-major rollout of
parallel environments split over ``data``; the clipped surrogate, the value loss
and an entropy bonus are differentiated together (``has_aux``) and the policy and
value networks updated by one ``optax.adam`` step. The networks' hidden layers
are split over ``model`` (4x2 mesh).
"""

from __future__ import annotations

import chex
import jax
import jax.numpy as jnp
import optax
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from bench.models.program import Program, RandomArrays, check_size, make_mesh

NAME = "chex_ppo_gae"
SIZES = {
    "small": dict(envs=8, steps=8, obs=8, hidden=32, actions=4),
    "large": dict(envs=256, steps=128, obs=64, hidden=512, actions=16),
}
PARAM_SPECS = {
    "pi_w1": P(None, "model"), "pi_b1": P("model"), "pi_w2": P("model", None),
    "v_w1": P(None, "model"), "v_w2": P("model", None),
}  # fmt: skip


@chex.dataclass(mappable_dataclass=False)
class TrainState:
    params: dict
    opt_state: optax.OptState
    step: chex.Array


@chex.dataclass(mappable_dataclass=False)
class Rollout:
    obs: chex.Array
    actions: chex.Array
    rewards: chex.Array
    dones: chex.Array
    old_log_probs: chex.Array
    values: chex.Array


def networks(params, obs):
    hidden = jnp.tanh(obs @ params["pi_w1"] + params["pi_b1"])
    value = jnp.tanh(obs @ params["v_w1"]) @ params["v_w2"]
    return hidden @ params["pi_w2"], value[..., 0]


def advantages_of(rewards, values, dones, last_value, gamma=0.99, lam=0.95):
    def body(carry, step):
        advantage, next_value = carry
        reward, value, done = step
        delta = reward + gamma * next_value * (1 - done) - value
        advantage = delta + gamma * lam * (1 - done) * advantage
        return (advantage, value), advantage

    carry = (jnp.zeros_like(last_value), last_value)
    _, advantages = jax.lax.scan(body, carry, (rewards, values, dones), reverse=True)
    return advantages


def make(size: str = "small") -> Program:
    check_size(size)
    dims = SIZES[size]
    mesh = make_mesh((4, 2), ("data", "model"))
    rand = RandomArrays(seed=213)
    steps, envs = dims["steps"], dims["envs"]
    obs, hidden, actions = dims["obs"], dims["hidden"], dims["actions"]
    params = {
        "pi_w1": rand.weight((obs, hidden)), "pi_b1": rand.normal((hidden,), 0.01),
        "pi_w2": rand.weight((hidden, actions)), "v_w1": rand.weight((obs, hidden)),
        "v_w2": rand.weight((hidden, 1)),
    }  # fmt: skip
    params = jax.device_put(params, {k: NamedSharding(mesh, s) for k, s in PARAM_SPECS.items()})
    tx = optax.adam(3e-4)
    state = TrainState(params=params, opt_state=tx.init(params), step=jnp.zeros((), jnp.int32))
    rollout = Rollout(
        obs=rand.normal((steps, envs, obs)),
        actions=rand.integers(actions, (steps, envs)),
        rewards=rand.normal((steps, envs)),
        dones=(rand.normal((steps, envs)) > 1.5).astype("float32"),
        old_log_probs=-1.4 + 0.1 * rand.normal((steps, envs)),
        values=rand.normal((steps, envs)),
    )
    time_major = NamedSharding(mesh, P(None, "data"))
    rollout = jax.tree.map(lambda a: jax.device_put(a, time_major), rollout)
    last_obs = jax.device_put(rand.normal((envs, obs)), NamedSharding(mesh, P("data")))

    def update(state, rollout, last_obs):
        chex.assert_rank(rollout.obs, 3)
        chex.assert_shape(rollout.rewards, (steps, envs))
        _, last_value = networks(state.params, last_obs)
        advantages = advantages_of(rollout.rewards, rollout.values, rollout.dones, last_value)
        returns = advantages + rollout.values
        advantages = (advantages - advantages.mean()) / (advantages.std() + 1e-8)

        def loss_fn(params):
            logits, values = networks(params, rollout.obs)
            log_probs = jax.nn.log_softmax(logits)
            taken = jnp.take_along_axis(log_probs, rollout.actions[..., None], axis=-1)[..., 0]
            ratio = jnp.exp(taken - rollout.old_log_probs)
            clipped = jnp.clip(ratio, 0.8, 1.2)
            policy = -jnp.minimum(ratio * advantages, clipped * advantages).mean()
            value = 0.5 * ((values - returns) ** 2).mean()
            entropy = -(jnp.exp(log_probs) * log_probs).sum(-1).mean()
            return policy + 0.5 * value - 0.01 * entropy, (policy, value, entropy)

        (loss, parts), grads = jax.value_and_grad(loss_fn, has_aux=True)(state.params)
        updates, opt_state = tx.update(grads, state.opt_state)
        params = optax.apply_updates(state.params, updates)
        return state.replace(params=params, opt_state=opt_state, step=state.step + 1), loss, parts

    return Program(
        name=NAME,
        description="chex.dataclass PPO actor-critic: GAE by a reverse scan, envs on data, "
        "hidden layers on model (4x2), adam",
        fun=update,
        args=(state, rollout, last_obs),
        in_shardings=None,
        out_shardings=None,
        mesh=mesh,
    )
