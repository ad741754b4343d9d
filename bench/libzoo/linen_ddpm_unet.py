"""A flax linen diffusion U-Net trained by the DDPM noise-prediction step, data-parallel.

ResNet blocks of ``nn.Conv`` + ``nn.GroupNorm(num_groups=8)`` + swish,
conditioned on a sinusoidal timestep embedding, average-pool downsampling and
``nn.ConvTranspose`` upsampling with a skip concatenation; the step draws
timesteps and noise with ``jax.random`` inside, noises the images by a linear
beta schedule, steps ``optax.adamw`` and keeps an EMA of the parameters with
``optax.incremental_update``. NHWC images split over ``data`` (8 devices), the
replicated (params, EMA, optimizer state) tuple donated.
"""

from __future__ import annotations

import math

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from bench.models.program import Program, RandomArrays, check_size, make_mesh

NAME = "linen_ddpm_unet"
SIZES = {
    "small": dict(batch=8, size=8, channels=3, width=16, steps=100),
    "large": dict(batch=64, size=32, channels=3, width=64, steps=1000),
}


def timestep_embedding(t, dim):
    half = dim // 2
    freqs = jnp.exp(-math.log(10000.0) * jnp.arange(half) / half)
    args = t[:, None].astype(jnp.float32) * freqs[None]
    return jnp.concatenate([jnp.sin(args), jnp.cos(args)], -1)


class ResBlock(nn.Module):
    features: int

    @nn.compact
    def __call__(self, x, temb):
        h = nn.swish(nn.GroupNorm(num_groups=8)(x))
        h = nn.Conv(self.features, (3, 3))(h)
        h = h + nn.Dense(self.features)(nn.swish(temb))[:, None, None, :]
        h = nn.swish(nn.GroupNorm(num_groups=8)(h))
        h = nn.Conv(self.features, (3, 3))(h)
        if x.shape[-1] != self.features:
            x = nn.Conv(self.features, (1, 1))(x)
        return x + h


class UNet(nn.Module):
    width: int
    channels: int

    @nn.compact
    def __call__(self, x, t):
        temb = timestep_embedding(t, self.width)
        temb = nn.Dense(4 * self.width)(nn.swish(nn.Dense(4 * self.width)(temb)))
        h0 = nn.Conv(self.width, (3, 3))(x)
        h1 = ResBlock(self.width)(h0, temb)
        d1 = nn.avg_pool(h1, (2, 2), (2, 2))
        h2 = ResBlock(2 * self.width)(d1, temb)
        mid = ResBlock(2 * self.width)(h2, temb)
        u1 = nn.ConvTranspose(self.width, (2, 2), strides=(2, 2))(mid)
        h3 = ResBlock(self.width)(jnp.concatenate([u1, h1], -1), temb)
        return nn.Conv(self.channels, (3, 3))(nn.swish(nn.GroupNorm(num_groups=8)(h3)))


def make(size="small"):
    check_size(size)
    d = SIZES[size]
    mesh = make_mesh((8,), ("data",))
    net = UNet(d["width"], d["channels"])
    tx = optax.adamw(2e-4)
    betas = jnp.linspace(1e-4, 0.02, d["steps"])
    alpha_bar = jnp.cumprod(1.0 - betas)
    images = RandomArrays(seed=1105).normal((d["batch"], d["size"], d["size"], d["channels"]))
    params = net.init(jax.random.key(0), images[:1], jnp.zeros((1,), jnp.int32))["params"]
    rep = NamedSharding(mesh, P())
    state = (params, jax.tree.map(lambda p: p.copy(), params), tx.init(params))
    state = jax.device_put(state, rep)
    b_sh = NamedSharding(mesh, P("data"))

    def train_step(state, images, key):
        params, ema, opt_state = state
        k_t, k_n = jax.random.split(key)
        t = jax.random.randint(k_t, (images.shape[0],), 0, d["steps"])
        noise = jax.random.normal(k_n, images.shape)
        ab = alpha_bar[t][:, None, None, None]
        noisy = jnp.sqrt(ab) * images + jnp.sqrt(1 - ab) * noise

        def loss_fn(params):
            return jnp.mean((net.apply({"params": params}, noisy, t) - noise) ** 2)

        loss, grads = jax.value_and_grad(loss_fn)(params)
        updates, opt_state = tx.update(grads, opt_state, params)
        params = optax.apply_updates(params, updates)
        ema = optax.incremental_update(params, ema, 0.001)
        return (params, ema, opt_state), loss

    return Program(
        name=NAME,
        description="linen DDPM U-Net (Conv, GroupNorm, ConvTranspose, timestep embedding), adamw + EMA, data=8",
        fun=train_step,
        args=(state, jax.device_put(images, b_sh), jax.random.key(7)),
        in_shardings=(rep, b_sh, rep),
        out_shardings=None,
        mesh=mesh,
        donate_argnums=(0,),
    )
