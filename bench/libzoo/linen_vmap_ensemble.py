"""A flax linen critic ensemble (``nn.vmap``) sharded over its ensemble axis, SAC-style.

``nn.vmap(QNet, variable_axes={'params': 0}, split_rngs={'params': True},
in_axes=None, axis_size=E)`` makes E Q-networks (Dense, LayerNorm); every
parameter's leading ensemble axis is split over the ``ensemble`` mesh axis, the
batch over ``data`` (mesh 2x4). The update takes a TD target from a target
ensemble (min over members), steps ``optax.adam`` and moves the target by
``optax.incremental_update`` (Polyak); parameters, target and optimizer state
are donated.
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from bench.models.program import Program, RandomArrays, check_size, make_mesh

NAME = "linen_vmap_ensemble"
SIZES = {
    "small": dict(batch=16, obs=12, act=4, hidden=32, ensemble=2),
    "large": dict(batch=256, obs=64, act=16, hidden=256, ensemble=10),
}


class QNet(nn.Module):
    hidden: int

    @nn.compact
    def __call__(self, obs, act):
        x = jnp.concatenate([obs, act], -1)
        x = nn.relu(nn.Dense(self.hidden)(x))
        x = nn.LayerNorm()(x)
        x = nn.relu(nn.Dense(self.hidden)(x))
        return nn.Dense(1)(x)[..., 0]


def make(size="small"):
    check_size(size)
    d = SIZES[size]
    mesh = make_mesh((2, 4), ("ensemble", "data"))
    Ensemble = nn.vmap(
        QNet,
        variable_axes={"params": 0},
        split_rngs={"params": True},
        in_axes=None,
        out_axes=0,
        axis_size=d["ensemble"],
    )
    critic = Ensemble(d["hidden"])
    tx = optax.adam(3e-4)
    rand = RandomArrays(seed=1103)
    obs = rand.normal((d["batch"], d["obs"]))
    act = rand.normal((d["batch"], d["act"]))
    rew = rand.normal((d["batch"],))
    nobs = rand.normal((d["batch"], d["obs"]))
    nact = rand.normal((d["batch"], d["act"]))
    params = critic.init(jax.random.key(0), obs[:1], act[:1])["params"]
    target = jax.tree.map(lambda p: p.copy(), params)
    opt_state = tx.init(params)
    ens = lambda tree: jax.tree.map(
        lambda x: NamedSharding(mesh, P("ensemble") if x.ndim else P()), tree
    )
    p_sh, t_sh, o_sh = ens(params), ens(target), ens(opt_state)
    b_sh = NamedSharding(mesh, P("data"))
    batch = tuple(jax.device_put(a, b_sh) for a in (obs, act, rew, nobs, nact))

    def update(params, target, opt_state, obs, act, rew, nobs, nact):
        next_q = critic.apply({"params": target}, nobs, nact).min(axis=0)
        y = jax.lax.stop_gradient(rew + 0.99 * next_q)

        def loss_fn(params):
            q = critic.apply({"params": params}, obs, act)
            return ((q - y[None]) ** 2).mean()

        loss, grads = jax.value_and_grad(loss_fn)(params)
        updates, opt_state = tx.update(grads, opt_state, params)
        params = optax.apply_updates(params, updates)
        target = optax.incremental_update(params, target, 0.005)
        return params, target, opt_state, loss

    return Program(
        name=NAME,
        description="linen nn.vmap critic ensemble sharded over 'ensemble', target net Polyak, 2x4",
        fun=update,
        args=(
            jax.device_put(params, p_sh),
            jax.device_put(target, t_sh),
            jax.device_put(opt_state, o_sh),
        )
        + batch,
        in_shardings=(p_sh, t_sh, o_sh) + (b_sh,) * 5,
        out_shardings=None,
        mesh=mesh,
        donate_argnums=(0, 1, 2),
    )
