"""A flax linen convolutional autoencoder of ``nn.Sequential`` stages.

The encoder: ``nn.Conv`` / ``nn.GroupNorm`` / ``nn.swish`` with a strided conv
and ``nn.max_pool`` (``lax.reduce_window``), an ``nn.avg_pool`` skip; the
decoder: ``nn.ConvTranspose`` upsampling back to the image. A reconstruction
loss, a ``TrainState`` with ``optax.adamw`` on a warmup-cosine schedule; images
over ``('data', 'fsdp')`` and the output channels of the kernels with at least
``2c`` of them over ``model`` of a 2x2x2 mesh (the Adam moments alike).
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

NAME = "linen_conv_gn_ae"
SIZES = {"small": dict(batch=8, size=16, c=8), "large": dict(batch=64, size=64, c=64)}


class AE(nn.Module):
    c: int

    @nn.compact
    def __call__(self, x):
        c = self.c
        enc = nn.Sequential(
            [
                nn.Conv(c, (3, 3)),
                nn.GroupNorm(num_groups=4),
                nn.swish,
                lambda h: nn.max_pool(h, (2, 2), strides=(2, 2)),
                nn.Conv(2 * c, (3, 3)),
                nn.GroupNorm(num_groups=4),
                nn.swish,
                nn.Conv(4 * c, (3, 3), strides=(2, 2)),
                nn.GroupNorm(num_groups=8),
                nn.swish,
            ]
        )
        z = enc(x)
        z = z + nn.avg_pool(z, (3, 3), strides=(1, 1), padding="SAME")
        dec = nn.Sequential(
            [
                nn.ConvTranspose(2 * c, (3, 3), strides=(2, 2)),
                nn.GroupNorm(num_groups=4),
                nn.swish,
                nn.ConvTranspose(c, (3, 3), strides=(2, 2)),
                nn.GroupNorm(num_groups=4),
                nn.swish,
                nn.Conv(x.shape[-1], (1, 1)),
            ]
        )
        return dec(z)


def make(size="small"):
    check_size(size)
    d = SIZES[size]
    mesh = make_mesh((2, 2, 2), ("data", "fsdp", "model"))
    model = AE(d["c"])
    rand = RandomArrays(seed=1309)
    images = rand.normal((d["batch"], d["size"], d["size"], 3))
    params = model.init(jax.random.key(0), images[:1])["params"]
    sched = optax.warmup_cosine_decay_schedule(0.0, 1e-3, 10, 100)
    state = train_state.TrainState.create(
        apply_fn=model.apply, params=params, tx=optax.adamw(sched)
    )

    def spec(leaf):
        # Kernels with at least 2c output channels split them over 'model'.
        if getattr(leaf, "ndim", 0) == 4 and leaf.shape[-1] >= 2 * d["c"]:
            return NamedSharding(mesh, P(None, None, None, "model"))
        return NamedSharding(mesh, P())

    shard = jax.tree.map(spec, state)
    state = jax.device_put(state, shard)
    images = jax.device_put(images, NamedSharding(mesh, P(("data", "fsdp"))))

    def step(state, images):
        def loss_fn(p):
            return jnp.mean((state.apply_fn({"params": p}, images) - images) ** 2)

        loss, g = jax.value_and_grad(loss_fn)(state.params)
        return state.apply_gradients(grads=g), loss

    return Program(
        name=NAME,
        description="linen Sequential Conv/GroupNorm/max_pool/avg_pool + ConvTranspose AE, TrainState adamw, 2x2x2",
        fun=step,
        args=(state, images),
        in_shardings=(shard, NamedSharding(mesh, P(("data", "fsdp")))),
        out_shardings=(shard, NamedSharding(mesh, P())),
        mesh=mesh,
        donate_argnums=(0,),
    )
