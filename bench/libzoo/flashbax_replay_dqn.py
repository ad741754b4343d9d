"""A DQN step over a flashbax replay buffer whose state is donated, as flashbax's examples train.

``fbx.make_flat_buffer`` (one row per environment, ``add_batch_size`` of them) holds
observations, actions, rewards and done flags; its state, prefilled with a few steps, is donated
through the jitted step, which adds the environments' new transitions (``buffer.add``: a
dynamic update at the write index), samples a batch of (first, second) experience pairs
(``buffer.sample``: random rows and times gathered), takes a double-DQN Huber TD step with an
optax adam update and reports ``buffer.can_sample``. The buffer's environment axis and the new
transitions split eight ways over ``data``; the networks replicated.
"""

from __future__ import annotations

import flashbax as fbx
import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from bench.models.program import Program, RandomArrays, check_size, make_mesh

NAME = "flashbax_replay_dqn"
SIZES = {
    "small": dict(envs=8, max_length=64, batch=16, obs=6, actions=3, hidden=32),
    "large": dict(envs=64, max_length=100_000, batch=256, obs=64, actions=18, hidden=256),
}


def make(size: str = "small") -> Program:
    check_size(size)
    dims = SIZES[size]
    mesh = make_mesh((8,), ("data",))
    rand = RandomArrays(seed=1610)
    envs, obs, actions = dims["envs"], dims["obs"], dims["actions"]
    replicated, rows = NamedSharding(mesh, P()), NamedSharding(mesh, P("data"))
    buffer = fbx.make_flat_buffer(
        max_length=dims["max_length"], min_length=2, sample_batch_size=dims["batch"],
        add_batch_size=envs,
    )  # fmt: skip

    def transitions():
        return {"obs": rand.normal((envs, obs)), "action": rand.integers(actions, (envs,)),
                "reward": rand.normal((envs,)), "done": rand.normal((envs,)) > 1.5}  # fmt: skip

    example = {"obs": np.zeros(obs, np.float32), "action": np.int32(0),
               "reward": np.float32(0), "done": np.bool_(False)}  # fmt: skip
    state = buffer.init(example)
    for _ in range(3):
        state = buffer.add(state, transitions())
    state_shardings = jax.tree.map(
        lambda leaf: rows if leaf.ndim and leaf.shape[0] == envs else replicated, state
    )
    state = jax.device_put(state, state_shardings)
    params = jax.device_put(
        {"w1": rand.weight((obs, dims["hidden"])), "w2": rand.weight((dims["hidden"], actions))},
        replicated,
    )
    target = jax.tree.map(jnp.copy, params)
    tx = optax.adam(1e-3)
    opt_state = jax.device_put(tx.init(params), replicated)
    new = jax.device_put(transitions(), rows)
    key = jax.device_put(jax.random.key_data(jax.random.key(7)), replicated)

    def q_values(p, o):
        return jnp.tanh(o @ p["w1"]) @ p["w2"]

    def step(state, params, target, opt_state, new, key):
        state = buffer.add(state, new)
        batch = buffer.sample(state, jax.random.wrap_key_data(key)).experience
        first, second = batch.first, batch.second

        def td_loss(p):
            q_first = jnp.take_along_axis(q_values(p, first["obs"]), first["action"][:, None], 1)
            greedy = jnp.argmax(q_values(p, second["obs"]), -1)
            q_next = jnp.take_along_axis(q_values(target, second["obs"]), greedy[:, None], 1)[:, 0]
            not_done = 1.0 - first["done"].astype(jnp.float32)
            y = jax.lax.stop_gradient(first["reward"] + 0.99 * not_done * q_next)
            return jnp.mean(optax.huber_loss(q_first[:, 0], y))

        loss, grads = jax.value_and_grad(td_loss)(params)
        updates, opt_state = tx.update(grads, opt_state, params)
        params = optax.apply_updates(params, updates)
        return state, params, opt_state, loss, buffer.can_sample(state)

    return Program(
        name=NAME,
        description="flashbax flat buffer add / sample in a donated state, double-DQN adam step, 8",
        fun=step,
        args=(state, params, target, opt_state, new, key),
        in_shardings=(state_shardings, replicated, replicated, replicated, rows, replicated),
        out_shardings=(state_shardings, replicated, replicated, replicated, replicated),
        mesh=mesh,
        donate_argnums=(0, 3),
    )
