"""flax linen RNNs: ``nn.Bidirectional`` GRUs and an ``nn.scan`` cell with a broadcast input.

An encoder of ``nn.Bidirectional(nn.RNN(nn.GRUCell), nn.RNN(nn.GRUCell))``, then
a cell scanned by ``nn.scan`` with ``variable_broadcast='params'``,
``split_rngs={'params': False}``, a carry and a per-sequence context passed
``nn.broadcast``; a ``TrainState`` with ``optax.adam`` stepped under
``jax.jit``, the batch over ``('data', 'fsdp')`` and the hidden kernels over
``model`` of a 2x2x2 mesh.
"""

from __future__ import annotations

import functools

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax
from flax.training import train_state
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from bench.models.program import Program, RandomArrays, check_size, make_mesh

NAME = "linen_scan_rnn_broadcast"
SIZES = {
    "small": dict(batch=8, seq=6, d_in=8, hidden=16, d_out=4),
    "large": dict(batch=64, seq=64, d_in=64, hidden=256, d_out=32),
}


class ContextCell(nn.Module):
    hidden: int

    @functools.partial(
        nn.scan,
        variable_broadcast="params",
        split_rngs={"params": False},
        in_axes=(1, nn.broadcast),
        out_axes=1,
    )
    @nn.compact
    def __call__(self, carry, x, context):
        h = nn.tanh(
            nn.Dense(self.hidden, name="ih")(x)
            + nn.Dense(self.hidden, use_bias=False, name="hh")(carry)
            + nn.Dense(self.hidden, use_bias=False, name="ctx")(context)
        )
        return h, h


class Seq2Seq(nn.Module):
    hidden: int
    d_out: int

    @nn.compact
    def __call__(self, x):
        enc = nn.Bidirectional(nn.RNN(nn.GRUCell(self.hidden)), nn.RNN(nn.GRUCell(self.hidden)))(x)
        context = enc.mean(1)
        carry = jnp.zeros((x.shape[0], self.hidden))
        _, hs = ContextCell(self.hidden)(carry, enc, context)
        return nn.Dense(self.d_out)(hs)


def make(size="small"):
    check_size(size)
    d = SIZES[size]
    mesh = make_mesh((2, 2, 2), ("data", "fsdp", "model"))
    rand = RandomArrays(seed=1207)
    x = rand.normal((d["batch"], d["seq"], d["d_in"]))
    y = rand.normal((d["batch"], d["seq"], d["d_out"]))
    model = Seq2Seq(d["hidden"], d["d_out"])
    params = model.init(jax.random.key(0), x)["params"]
    state = train_state.TrainState.create(apply_fn=model.apply, params=params, tx=optax.adam(1e-3))

    def spec(path, leaf):
        if (
            getattr(leaf, "ndim", 0) == 2
            and leaf.shape[-1] % 2 == 0
            and leaf.shape[-1] == d["hidden"]
            and leaf.shape[0] % 2 == 0
        ):
            return P(None, "model")
        return P()

    st_specs = jax.tree_util.tree_map_with_path(spec, state)
    st_sh = jax.tree.map(
        lambda s: NamedSharding(mesh, s), st_specs, is_leaf=lambda s: isinstance(s, P)
    )
    b_sh = NamedSharding(mesh, P(("data", "fsdp")))
    state = jax.device_put(state, st_sh)
    x, y = jax.device_put((x, y), b_sh)

    def step(state, x, y):
        def loss_fn(params):
            return jnp.mean((state.apply_fn({"params": params}, x) - y) ** 2)

        loss, grads = jax.value_and_grad(loss_fn)(state.params)
        return state.apply_gradients(grads=grads), loss

    return Program(
        name=NAME,
        description="linen nn.scan(variable_broadcast, nn.broadcast input) + Bidirectional GRU, TrainState, 2x2x2",
        fun=step,
        args=(state, x, y),
        in_shardings=(st_sh, b_sh, b_sh),
        out_shardings=(st_sh, None),
        mesh=mesh,
        donate_argnums=(0,),
    )
