"""Connect Four self-play with pgx, batched the way pgx's README batches its environments.

``pgx.make("connect_four")``; ``jax.vmap(env.init)`` over keys gives a batch of ``State``
dataclasses; a policy net reads each board's observation planes, masks its logits by
``state.legal_action_mask`` and samples a column; ``jax.vmap(env.step)`` plays it (the win
check scans the board's lines); a ``lax.scan`` of fixed length runs the games, terminated ones
stepping on as pgx allows, and accumulates each player's rewards. Returned: the rewards, how
many steps each game spent terminated, the player to move and the step counts. The games split
eight ways over ``data``.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import pgx
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from bench.models.program import Program, RandomArrays, check_size, make_mesh

NAME = "pgx_connect4_selfplay"
SIZES = {
    "small": dict(games=16, steps=12, hidden=32),
    "large": dict(games=1024, steps=42, hidden=256),
}


def make(size: str = "small") -> Program:
    check_size(size)
    dims = SIZES[size]
    mesh = make_mesh((8,), ("data",))
    rand = RandomArrays(seed=1605)
    env = pgx.make("connect_four")
    planes = 6 * 7 * 2
    replicated, rows = NamedSharding(mesh, P()), NamedSharding(mesh, P("data"))
    params = jax.device_put(
        {
            "w1": rand.weight((planes, dims["hidden"])),
            "w2": rand.weight((dims["hidden"], env.num_actions)),
        },
        replicated,
    )
    keys = jax.random.key_data(jax.random.split(jax.random.key(1), dims["games"]))
    keys = jax.device_put(keys, rows)

    def play(params, keys):
        keys = jax.random.wrap_key_data(keys)
        init_keys, play_keys = jax.vmap(jax.random.split, out_axes=1)(keys)
        state = jax.vmap(env.init)(init_keys)

        def move(carry, _):
            state, keys, total = carry
            keys, action_keys = jax.vmap(lambda k: tuple(jax.random.split(k)))(keys)
            boards = state.observation.reshape(state.observation.shape[0], -1).astype(jnp.float32)
            logits = jnp.tanh(boards @ params["w1"]) @ params["w2"]
            logits = jnp.where(state.legal_action_mask, logits, jnp.finfo(logits.dtype).min)
            action = jax.vmap(jax.random.categorical)(action_keys, logits)
            state = jax.vmap(env.step)(state, action)
            return (state, keys, total + state.rewards), state.terminated

        start = (state, play_keys, jnp.zeros((dims["games"], 2)))
        (state, _, total), terminated = jax.lax.scan(move, start, None, length=dims["steps"])
        return total, terminated.sum(0), state.current_player, state._step_count

    return Program(
        name=NAME,
        description="pgx connect_four self-play: vmapped init / step under legal-action masks in lax.scan, 8",
        fun=play,
        args=(params, keys),
        in_shardings=(replicated, rows),
        out_shardings=rows,
        mesh=mesh,
    )
