"""A Hyena / H3-style long-convolution block: causal convolution by FFT.

An implicit filter from a small MLP over positional features, decayed over
time; the convolution by ``jnp.fft.rfft`` / ``irfft`` zero-padded to twice the
length; a data-controlled gate through a ``jax.custom_jvp`` softplus with a
hand-written derivative; residual and layer norm. Two blocks trained by SGD
under ``jax.jit`` with donated parameters; channels over ``model``, the batch
over ``('data', 'fsdp')`` of a 2x2x2 mesh.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from bench.models.program import Program, RandomArrays, check_size, make_mesh

NAME = "jax_fft_long_conv"
SIZES = {
    "small": dict(batch=8, seq=32, d=16, pos=8, h=16),
    "large": dict(batch=32, seq=1024, d=256, pos=32, h=64),
}


@jax.custom_jvp
def soft_act(x):
    return jnp.logaddexp(x, 0.0)


@soft_act.defjvp
def _soft_act_jvp(primals, tangents):
    (x,), (t,) = primals, tangents
    return soft_act(x), jax.nn.sigmoid(x) * t


def fft_conv(u, k):  # u: (b, L, d), k: (L, d)
    L = u.shape[1]
    uf = jnp.fft.rfft(u, n=2 * L, axis=1)
    kf = jnp.fft.rfft(k, n=2 * L, axis=0)
    return jnp.fft.irfft(uf * kf[None], n=2 * L, axis=1)[:, :L]


def block(p, x, pos):
    filt = jnp.tanh(pos @ p["f1"]) @ p["f2"]  # (L, d)
    filt = filt * jnp.exp(-0.05 * jnp.arange(x.shape[1]))[:, None]
    v = x @ p["wv"]
    g = x @ p["wg"]
    y = fft_conv(v, filt) * soft_act(g)
    y = y @ p["wo"] + x
    mu = y.mean(-1, keepdims=True)
    return (y - mu) / jnp.sqrt(((y - mu) ** 2).mean(-1, keepdims=True) + 1e-5)


def make(size="small"):
    check_size(size)
    d = SIZES[size]
    mesh = make_mesh((2, 2, 2), ("data", "fsdp", "model"))
    rand = RandomArrays(seed=1304)
    S = lambda *s: NamedSharding(mesh, P(*s))
    D = d["d"]
    params = {
        "f1": rand.weight((d["pos"], d["h"])),
        "f2": rand.weight((d["h"], D)),
        "wv": rand.weight((D, D)),
        "wg": rand.weight((D, D)),
        "wo": rand.weight((D, D)),
    }
    pshard = {
        "f1": S(),
        "f2": S(None, "model"),
        "wv": S(None, "model"),
        "wg": S(None, "model"),
        "wo": S("model", None),
    }
    params = jax.device_put(params, pshard)
    t = jnp.linspace(0, 1, d["seq"])[:, None]
    pos = jax.device_put(
        jnp.concatenate(
            [
                jnp.sin(t * jnp.arange(1, d["pos"] // 2 + 1) * 3.1),
                jnp.cos(t * jnp.arange(1, d["pos"] // 2 + 1) * 3.1),
            ],
            -1,
        ),
        S(),
    )
    x = jax.device_put(rand.normal((d["batch"], d["seq"], D)), S(("data", "fsdp")))

    def step(params, x, pos):
        def loss(p):
            y = block(p, block(p, x, pos), pos)
            return jnp.mean((y[:, 1:] - x[:, :-1]) ** 2)

        l, g = jax.value_and_grad(loss)(params)
        return jax.tree.map(lambda a, b: a - 0.1 * b, params, g), l

    return Program(
        name=NAME,
        description="FFT long conv (rfft/irfft), implicit filter MLP, custom_jvp act, 2x2x2",
        fun=step,
        args=(params, x, pos),
        in_shardings=(pshard, S(("data", "fsdp")), S()),
        out_shardings=(pshard, S()),
        mesh=mesh,
        donate_argnums=(0,),
    )
