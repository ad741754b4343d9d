"""An equinox LM whose MLP is tensor-parallel by a ``jax.shard_map`` inside the module.

Each block's MLP is Megatron-style: a column-parallel up projection and a
row-parallel down projection finished by ``lax.psum`` over ``model``, written
with ``jax.shard_map`` in the module's ``__call__`` (the mesh a static field);
the rest is ``eqx.nn`` (Embedding, LayerNorm, Linear head). Parameters are
placed by ``eqx.filter_shard`` with a sharding tree built over
``eqx.filter(model, eqx.is_array)`` by path; the step is
``eqx.filter_value_and_grad`` + ``optax.adam`` under ``eqx.filter_jit(donate='all')``,
the batch over ``data`` of a 2x4 mesh.
"""

from __future__ import annotations

import equinox as eqx
import jax
import optax
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from bench.libzoo.equinox_jit import filter_jit
from bench.models.program import Program, RandomArrays, check_size, make_mesh

NAME = "eqx_shard_map_tp"
SIZES = {
    "small": dict(batch=8, seq=8, vocab=32, d=16, hidden=64, layers=2),
    "large": dict(batch=64, seq=128, vocab=1024, d=256, hidden=1024, layers=4),
}


class TPMlp(eqx.Module):
    w_up: jax.Array
    w_down: jax.Array
    mesh: jax.sharding.Mesh = eqx.field(static=True)

    def __init__(self, d, hidden, mesh, key):
        k1, k2 = jax.random.split(key)
        self.w_up = jax.random.normal(k1, (d, hidden)) * d**-0.5
        self.w_down = jax.random.normal(k2, (hidden, d)) * hidden**-0.5
        self.mesh = mesh

    def __call__(self, x):
        def local(x, w_up, w_down):
            h = jax.nn.gelu(x @ w_up)
            return jax.lax.psum(h @ w_down, "model")

        return jax.shard_map(
            local,
            mesh=self.mesh,
            in_specs=(P("data"), P(None, "model"), P("model", None)),
            out_specs=P("data"),
        )(x, self.w_up, self.w_down)


class Block(eqx.Module):
    norm: eqx.nn.LayerNorm
    mlp: TPMlp

    def __init__(self, d, hidden, mesh, key):
        self.norm = eqx.nn.LayerNorm(d)
        self.mlp = TPMlp(d, hidden, mesh, key)

    def __call__(self, x):
        return x + self.mlp(jax.vmap(jax.vmap(self.norm))(x))


class Model(eqx.Module):
    embed: eqx.nn.Embedding
    blocks: list
    head: eqx.nn.Linear

    def __init__(self, d, mesh, key):
        keys = jax.random.split(key, d["layers"] + 2)
        self.embed = eqx.nn.Embedding(d["vocab"], d["d"], key=keys[0])
        self.blocks = [Block(d["d"], d["hidden"], mesh, k) for k in keys[2:]]
        self.head = eqx.nn.Linear(d["d"], d["vocab"], key=keys[1])

    def __call__(self, tokens):
        x = jax.vmap(jax.vmap(self.embed))(tokens)
        for block in self.blocks:
            x = block(x)
        return jax.vmap(jax.vmap(self.head))(x)


def make(size="small"):
    check_size(size)
    d = SIZES[size]
    mesh = make_mesh((2, 4), ("data", "model"))
    model = Model(d, mesh, jax.random.key(0))
    rep = NamedSharding(mesh, P())

    def sharding_of(path, leaf):
        name = getattr(path[-1], "name", "")
        if name == "w_up":
            return NamedSharding(mesh, P(None, "model"))
        if name == "w_down":
            return NamedSharding(mesh, P("model", None))
        return rep

    model_sh = jax.tree_util.tree_map_with_path(sharding_of, eqx.filter(model, eqx.is_array))
    model = eqx.filter_shard(model, model_sh)
    tx = optax.adam(1e-3)
    opt_state = eqx.filter_shard(tx.init(eqx.filter(model, eqx.is_array)), rep)
    b_sh = NamedSharding(mesh, P("data"))
    tokens = jax.device_put(
        RandomArrays(seed=1112).integers(d["vocab"], (d["batch"], d["seq"] + 1)), b_sh
    )

    def train_step(model, opt_state, tokens):
        def loss_fn(model):
            logits = model(tokens[:, :-1])
            return optax.softmax_cross_entropy_with_integer_labels(logits, tokens[:, 1:]).mean()

        loss, grads = eqx.filter_value_and_grad(loss_fn)(model)
        updates, opt_state = tx.update(grads, opt_state, eqx.filter(model, eqx.is_array))
        model = eqx.apply_updates(model, updates)
        model = eqx.filter_shard(model, model_sh)
        return model, opt_state, loss

    def jit(jit_function, fun):
        return filter_jit(jit_function, fun, donate="all")

    return Program(
        name=NAME,
        description="equinox LM with jax.shard_map Megatron MLP inside the module, filter_jit(donate='all'), 2x4",
        fun=train_step,
        args=(model, opt_state, tokens),
        in_shardings=None,
        out_shardings=None,
        mesh=mesh,
        donate_argnums=(0, 1, 2),
        jit=jit,
    )
