"""flax linen blocks under ``nn.scan(nn.remat(Block))`` sharded by logical axis names.

Each block's parameters are created with ``nn.with_logical_partitioning``
(``embed``, ``mlp``; the scan adds ``layers`` through ``metadata_params``), its
hidden activation pinned by ``nn.with_logical_constraint``, then ``nn.Dropout``
(``split_rngs={"dropout": True}``: one key per layer, folded with the step).
The parameter shardings are ``nn.logical_to_mesh_sharding`` of
``nn.get_partition_spec`` of the abstract init under a rule table (``embed`` ->
``fsdp``, ``mlp`` -> ``model``, ``batch`` -> ``data``), the parameters are
initialised by a jit with those ``out_shardings``, and the step is a
``TrainState`` with adamw applied under ``nn.logical_axis_rules`` (its key passed
as raw key data). Mesh 2x2x2 (``data``, ``fsdp``, ``model``); the state is donated.
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax
from flax.training import train_state
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from bench.models.program import Program, RandomArrays, check_size, make_mesh

NAME = "linen_scan_logical_dropout"
SIZES = {
    "small": dict(batch=8, seq=8, d=32, mlp=64, layers=2),
    "large": dict(batch=32, seq=128, d=256, mlp=1024, layers=4),
}
RULES = (("batch", "data"), ("embed", "fsdp"), ("mlp", "model"), ("layers", None), ("seq", None))


class Block(nn.Module):
    mlp: int

    @nn.compact
    def __call__(self, x, _):
        d = x.shape[-1]
        h = nn.LayerNorm(
            scale_init=nn.with_logical_partitioning(nn.initializers.ones, ("embed",)),
            bias_init=nn.with_logical_partitioning(nn.initializers.zeros, ("embed",)),
        )(x)
        h = nn.Dense(
            self.mlp,
            kernel_init=nn.with_logical_partitioning(
                nn.initializers.lecun_normal(), ("embed", "mlp")
            ),
        )(h)
        h = nn.with_logical_constraint(jax.nn.relu(h), ("batch", "seq", "mlp"))
        h = nn.Dropout(0.1, deterministic=False)(h)
        h = nn.Dense(
            d,
            kernel_init=nn.with_logical_partitioning(
                nn.initializers.lecun_normal(), ("mlp", "embed")
            ),
        )(h)
        return x + h, None


class Model(nn.Module):
    mlp: int
    layers: int

    @nn.compact
    def __call__(self, x):
        stack = nn.scan(
            nn.remat(Block),
            variable_axes={"params": 0},
            split_rngs={"params": True, "dropout": True},
            length=self.layers,
            metadata_params={nn.PARTITION_NAME: "layers"},
        )
        x, _ = stack(self.mlp, name="blocks")(x, None)
        return nn.Dense(1)(x).mean(axis=(1, 2))


def make(size="small"):
    check_size(size)
    dims = SIZES[size]
    mesh = make_mesh((2, 2, 2), ("data", "fsdp", "model"))
    model = Model(dims["mlp"], dims["layers"])
    rand = RandomArrays(seed=102)
    x = rand.normal((dims["batch"], dims["seq"], dims["d"]))
    y = rand.normal((dims["batch"],))
    abstract = jax.eval_shape(lambda: model.init(jax.random.key(0), x))
    logical = nn.get_partition_spec(abstract)
    param_shardings = nn.logical_to_mesh_sharding(logical, mesh, RULES)["params"]
    params = jax.jit(
        lambda: nn.unbox(model.init(jax.random.key(0), x))["params"], out_shardings=param_shardings
    )()
    tx = optax.adamw(1e-3, weight_decay=0.01)
    replicated = NamedSharding(mesh, P())
    state = train_state.TrainState.create(apply_fn=model.apply, params=params, tx=tx)
    state = state.replace(step=jax.device_put(jnp.int32(0), replicated))
    state_shardings = jax.tree.map(lambda a: a.sharding if a.ndim else replicated, state)
    state = jax.device_put(state, state_shardings)
    batch = NamedSharding(mesh, P("data"))

    def train_step(state, x, y, key):
        dropout_key = jax.random.fold_in(key, state.step)

        def loss_fn(params):
            with nn.logical_axis_rules(RULES):
                pred = state.apply_fn({"params": params}, x, rngs={"dropout": dropout_key})
            return jnp.mean((pred - y) ** 2)

        loss, grads = jax.value_and_grad(loss_fn)(state.params)
        return state.apply_gradients(grads=grads), loss

    key = jax.device_put(jax.random.key_data(jax.random.key(7)), NamedSharding(mesh, P()))

    def step(state, x, y, key_data):
        return train_step(state, x, y, jax.random.wrap_key_data(key_data))

    return Program(
        name=NAME,
        description="linen nn.scan(nn.remat(Block)) logical rules -> logical_to_mesh_sharding, dropout, TrainState adamw",
        fun=step,
        args=(state, jax.device_put(x, batch), jax.device_put(y, batch), key),
        in_shardings=(state_shardings, batch, batch, NamedSharding(mesh, P())),
        out_shardings=(state_shardings, NamedSharding(mesh, P())),
        mesh=mesh,
        donate_argnums=(0,),
        mesh_context=True,
    )
