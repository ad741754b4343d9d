"""An equinox two-layer LSTM language model, each cell stepped by ``lax.scan``.

``eqx.nn.Embedding``, two ``eqx.nn.LSTMCell`` layers each run over the sequence by
``jax.lax.scan`` (equinox's RNN example), an ``eqx.nn.Linear`` readout, the model
``jax.vmap``-ed over a batch split over ``data``; ``eqx.filter_grad`` and
``optax.chain(clip_by_global_norm, adam)`` under ``eqx.filter_jit`` with the
model and optimizer state donated. The cells' gate weights and biases are split
over ``model`` by rows (a sharding tree made by ``eqx.tree_at`` on a replicated
one, applied by ``eqx.filter_shard``) on a 2x4 mesh.
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import optax
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from bench.libzoo.equinox_jit import filter_jit
from bench.models.program import Program, RandomArrays, check_size, make_mesh

NAME = "eqx_lstm_lm"
SIZES = {
    "small": dict(batch=8, seq=8, vocab=32, embed=16, hidden=32),
    "large": dict(batch=64, seq=64, vocab=512, embed=128, hidden=512),
}


class LSTMLM(eqx.Module):
    embed: eqx.nn.Embedding
    cells: list
    out: eqx.nn.Linear

    def __init__(self, dims, key):
        k0, k1, k2, k3 = jax.random.split(key, 4)
        self.embed = eqx.nn.Embedding(dims["vocab"], dims["embed"], key=k0)
        self.cells = [
            eqx.nn.LSTMCell(dims["embed"], dims["hidden"], key=k1),
            eqx.nn.LSTMCell(dims["hidden"], dims["hidden"], key=k2),
        ]
        self.out = eqx.nn.Linear(dims["hidden"], dims["vocab"], key=k3)

    def __call__(self, tokens):
        xs = jax.vmap(self.embed)(tokens)
        for cell in self.cells:

            def step(carry, x, cell=cell):
                h, c = cell(x, carry)
                return (h, c), h

            zeros = jnp.zeros(cell.hidden_size)
            _, xs = jax.lax.scan(step, (zeros, zeros), xs)
        return jax.vmap(self.out)(xs)


def gates(model):
    return [leaf for cell in model.cells for leaf in (cell.weight_ih, cell.weight_hh, cell.bias)]


def make(size: str = "small") -> Program:
    check_size(size)
    dims = SIZES[size]
    mesh = make_mesh((2, 4), ("data", "model"))
    model = LSTMLM(dims, jax.random.key(6))
    optimizer = optax.chain(optax.clip_by_global_norm(1.0), optax.adam(1e-3))
    replicated = NamedSharding(mesh, P())
    shardings = jax.tree.map(lambda _: replicated, eqx.filter(model, eqx.is_array))
    shardings = eqx.tree_at(gates, shardings, replace=[NamedSharding(mesh, P("model"))] * 6)
    model = eqx.filter_shard(model, shardings)
    opt_state = optimizer.init(eqx.filter(model, eqx.is_inexact_array))
    opt_state = eqx.filter_shard(opt_state, replicated)
    tokens = RandomArrays(seed=206).integers(dims["vocab"], (dims["batch"], dims["seq"] + 1))
    tokens = jax.device_put(tokens, NamedSharding(mesh, P("data")))

    def make_step(model, opt_state, tokens):
        def loss_fn(model):
            logits = jax.vmap(model)(tokens[:, :-1])
            return optax.softmax_cross_entropy_with_integer_labels(logits, tokens[:, 1:]).mean()

        grads = eqx.filter_grad(loss_fn)(model)
        updates, opt_state = optimizer.update(grads, opt_state)
        return loss_fn(model), eqx.apply_updates(model, updates), opt_state

    def jit(jit_function, fun):
        return filter_jit(jit_function, fun, donate="all-except-first")

    return Program(
        name=NAME,
        description="equinox LSTMCell LM, each layer a lax.scan; gates on model (2x4), "
        "filter_grad, clip + adam",
        fun=make_step,
        args=(model, opt_state, tokens),
        in_shardings=None,
        out_shardings=None,
        mesh=mesh,
        donate_argnums=(1, 2),
        jit=jit,
    )
