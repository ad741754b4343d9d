"""A flax linen residual MLP whose blocks are stacked by ``nn.remat_scan``, FSDP x TP sharded.

``nn.remat_scan(ResBlock, lengths=(2, 2))`` stacks four LayerNorm + Dense blocks
into a scan of a remat'd scan (their kernels stacked ``(2, 2, d, 2d)``); the
input projection's kernel carries ``nn.with_partitioning(..., (None, 'fsdp'))``,
the stacked kernels (which carry no metadata through ``remat_scan``) are sharded
by their path, ``('fsdp', 'model')`` / ``('model', 'fsdp')`` on their last two
dimensions. Shardings come from ``nn.get_partition_spec`` of
``jax.eval_shape(init)``, the state is made by a jitted init with those
``out_shardings``; a ``optax.sgd(momentum, nesterov)`` step, the batch over
``('data', 'fsdp')`` of a 2x2x2 mesh.
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from bench.models.program import Program, RandomArrays, check_size, make_mesh

NAME = "linen_remat_scan"
SIZES = {
    "small": dict(batch=16, features=24, d=32, classes=10),
    "large": dict(batch=256, features=128, d=512, classes=100),
}


class ResBlock(nn.Module):
    d: int

    @nn.compact
    def __call__(self, x):
        h = nn.LayerNorm()(x)
        h = nn.Dense(2 * self.d)(h)
        h = nn.gelu(h)
        h = nn.Dense(self.d)(h)
        return x + h


class Net(nn.Module):
    d: int
    classes: int

    @nn.compact
    def __call__(self, x):
        x = nn.Dense(
            self.d, kernel_init=nn.with_partitioning(nn.initializers.lecun_normal(), (None, "fsdp"))
        )(x)
        x = nn.remat_scan(ResBlock, lengths=(2, 2))(self.d)(x)
        x = nn.LayerNorm()(x)
        return nn.Dense(self.classes)(x)


def make(size="small"):
    check_size(size)
    d = SIZES[size]
    mesh = make_mesh((2, 2, 2), ("data", "fsdp", "model"))
    net = Net(d["d"], d["classes"])
    tx = optax.sgd(0.05, momentum=0.9, nesterov=True)
    rand = RandomArrays(seed=1102)
    x = rand.normal((d["batch"], d["features"]))
    y = rand.integers(d["classes"], (d["batch"],))

    def init(key):
        params = net.init(key, jnp.zeros((1, d["features"])))["params"]
        return params, tx.init(params)

    abstract = jax.eval_shape(init, jax.random.key(0))
    specs = nn.get_partition_spec(abstract)

    # remat_scan's stacked blocks carry no metadata: shard their kernels as the rest, by path.
    def block_spec(path, spec, leaf):
        # The blocks' kernels, stacked (2, 2, in, out): the up projection's out over
        # 'model', the down projection's in.
        if getattr(path[-1], "key", None) != "kernel" or leaf.ndim != 4:
            return spec
        if leaf.shape[-1] > leaf.shape[-2]:
            return P(None, None, "fsdp", "model")
        return P(None, None, "model", "fsdp")

    specs = jax.tree_util.tree_map_with_path(
        block_spec, specs, nn.unbox(abstract), is_leaf=lambda s: isinstance(s, P)
    )
    state_sharding = jax.tree.map(
        lambda s: NamedSharding(mesh, s), specs, is_leaf=lambda s: isinstance(s, P)
    )
    params, opt_state = jax.jit(init, out_shardings=state_sharding)(jax.random.key(0))
    batch_sharding = NamedSharding(mesh, P(("data", "fsdp")))

    def train_step(params, opt_state, x, y):
        def loss_fn(params):
            logits = net.apply({"params": params}, x)
            return optax.softmax_cross_entropy_with_integer_labels(logits, y).mean()

        loss, grads = jax.value_and_grad(loss_fn)(params)
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    return Program(
        name=NAME,
        description="linen nn.remat_scan residual stack (kernels sharded by path), with_partitioning input, sgd nesterov, 2x2x2",
        fun=train_step,
        args=(
            params,
            opt_state,
            jax.device_put(x, batch_sharding),
            jax.device_put(y, batch_sharding),
        ),
        in_shardings=(state_sharding[0], state_sharding[1], batch_sharding, batch_sharding),
        out_shardings=(state_sharding[0], state_sharding[1], None),
        mesh=mesh,
    )
