"""An additive-noise SDE solved by diffrax's ShARK on a space-time Levy-area Brownian tree.

As diffrax's docs recommend for additive noise: a ``VirtualBrownianTree`` with
``levy_area=diffrax.SpaceTimeLevyArea``, the ``ShARK`` solver on
``MultiTerm(ODETerm(drift), ControlTerm(diffusion, bm))`` with a constant
diffusion matrix, ``SaveAt(ts=...)``, a batch of paths by ``jax.vmap`` over
typed key arrays; a moment-matching loss differentiated through diffrax's
default adjoint. Paths over ``data`` of a 4x2 mesh, the drift's hidden layer
over ``model``.
"""

from __future__ import annotations

import diffrax
import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from bench.models.program import Program, RandomArrays, check_size, make_mesh

NAME = "diffrax_shark_sde"
SIZES = {
    "small": dict(paths=8, dim=4, noise=2, hidden=16, saves=5),
    "large": dict(paths=256, dim=16, noise=8, hidden=128, saves=20),
}


def drift(t, y, p):
    return jnp.tanh(y @ p["w1"] + p["b1"]) @ p["w2"] - p["decay"] * y


def diffusion(t, y, p):
    return p["sigma"]


def solve(p, y0, key, ts):
    bm = diffrax.VirtualBrownianTree(
        0.0,
        1.0,
        tol=1e-3,
        shape=(p["sigma"].shape[1],),
        key=key,
        levy_area=diffrax.SpaceTimeLevyArea,
    )
    terms = diffrax.MultiTerm(diffrax.ODETerm(drift), diffrax.ControlTerm(diffusion, bm))
    sol = diffrax.diffeqsolve(
        terms,
        diffrax.ShARK(),
        0.0,
        1.0,
        0.1,
        y0,
        args=p,
        saveat=diffrax.SaveAt(ts=ts),
        max_steps=16,
    )
    return sol.ys


def make(size="small"):
    check_size(size)
    d = SIZES[size]
    mesh = make_mesh((4, 2), ("data", "model"))
    rand = RandomArrays(seed=1306)
    S = lambda *s: NamedSharding(mesh, P(*s))
    p = {
        "w1": rand.weight((d["dim"], d["hidden"])),
        "b1": rand.normal((d["hidden"],), 0.1),
        "w2": rand.weight((d["hidden"], d["dim"])),
        "decay": jnp.float32(0.5),
        "sigma": rand.normal((d["dim"], d["noise"]), 0.3),
    }
    pshard = {
        "w1": S(None, "model"),
        "b1": S("model"),
        "w2": S("model", None),
        "decay": S(),
        "sigma": S(),
    }
    p = jax.device_put(p, pshard)
    y0 = jax.device_put(rand.normal((d["paths"], d["dim"])), S("data"))
    keys = jax.device_put(jax.random.split(jax.random.key(11), d["paths"]), S("data"))
    ts = jax.device_put(jnp.linspace(0.0, 1.0, d["saves"]), S())
    target_mean = jax.device_put(jnp.zeros((d["saves"], d["dim"])), S())

    def step(p, y0, keys, ts, target_mean):
        def loss(p):
            ys = jax.vmap(solve, in_axes=(None, 0, 0, None))(p, y0, keys, ts)
            m = ys.mean(0)
            v = ys.var(0)
            return jnp.mean((m - target_mean) ** 2) + jnp.mean((v - 0.25) ** 2), ys

        (l, ys), g = jax.value_and_grad(loss, has_aux=True)(p)
        return jax.tree.map(lambda a, b: a - 0.05 * b, p, g), l, ys[:, -1]

    return Program(
        name=NAME,
        description="diffrax ShARK SDE, VirtualBrownianTree SpaceTimeLevyArea, vmap over key arrays, grad, 4x2",
        fun=step,
        args=(p, y0, keys, ts, target_mean),
        in_shardings=None,
        out_shardings=None,
        mesh=mesh,
    )
