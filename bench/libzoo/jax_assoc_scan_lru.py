"""Linear recurrent units computed in parallel over time by ``jax.lax.associative_scan``.

The LRU's diagonal complex recurrence ``h_t = lambda * h_{t-1} + B x_t`` scanned
with the binary operator ``(a1, b1), (a2, b2) -> (a1 a2, a2 b1 + b2)`` over
complex64 values, read out by ``C`` (real part), a GLU and a residual; trained by
``optax.adam`` under ``jax.jit``, the batch over ``data`` and the state
features over ``model`` of a 2x4 mesh.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from bench.models.program import Program, RandomArrays, check_size, make_mesh

NAME = "jax_assoc_scan_lru"
SIZES = {
    "small": dict(batch=8, seq=16, d=16, state=32, layers=2),
    "large": dict(batch=64, seq=1024, d=256, state=512, layers=4),
}


def binary_op(e1, e2):
    a1, b1 = e1
    a2, b2 = e2
    return a1 * a2, a2 * b1 + b2


def lru(p, x):  # x: (batch, seq, d)
    lam = jnp.exp(-jnp.exp(p["nu_log"]) + 1j * jnp.exp(p["theta_log"]))
    bu = jnp.einsum("bld,dn->bln", x, p["B_re"] + 1j * p["B_im"]) * jnp.exp(p["gamma_log"])
    lam_t = jnp.broadcast_to(lam, bu.shape)
    _, h = jax.lax.associative_scan(binary_op, (lam_t, bu), axis=1)
    y = jnp.einsum("bln,nd->bld", h, p["C_re"] + 1j * p["C_im"]).real + x * p["D"]
    return y


def forward(params, x):
    for p in params["layers"]:
        h = x * jax.lax.rsqrt(jnp.mean(x * x, -1, keepdims=True) + 1e-6)
        y = jax.nn.gelu(lru(p, h))
        x = x + (y @ p["glu_a"]) * jax.nn.sigmoid(y @ p["glu_b"])
    return x.mean(1) @ params["head"]


def make(size="small"):
    check_size(size)
    d = SIZES[size]
    mesh = make_mesh((2, 4), ("data", "model"))
    rand = RandomArrays(seed=1212)
    D, N = d["d"], d["state"]
    # The LRU paper's ring init: |lambda| in [0.7, 0.9], phases in [0.01, 3.1].
    uniform = np.random.default_rng(1212).uniform
    layers = [
        {
            "nu_log": jnp.log(-jnp.log(uniform(0.7, 0.9, N).astype(np.float32))),
            "theta_log": jnp.log(uniform(0.01, 3.1, N).astype(np.float32)),
            "gamma_log": jnp.zeros((N,)),
            "B_re": rand.normal((D, N)) / (2 * D) ** 0.5,
            "B_im": rand.normal((D, N)) / (2 * D) ** 0.5,
            "C_re": rand.normal((N, D)) / N**0.5,
            "C_im": rand.normal((N, D)) / N**0.5,
            "D": rand.normal((D,)),
            "glu_a": rand.normal((D, D)) / D**0.5,
            "glu_b": rand.normal((D, D)) / D**0.5,
        }
        for _ in range(d["layers"])
    ]
    params = {"layers": layers, "head": rand.normal((D, 1)) / D**0.5}
    tx = optax.adam(1e-3)
    opt_state = tx.init(params)

    def spec(path, x):
        name = getattr(path[-1], "key", "")
        if name in ("nu_log", "theta_log", "gamma_log"):
            return NamedSharding(mesh, P("model"))
        if name in ("B_re", "B_im"):
            return NamedSharding(mesh, P(None, "model"))
        if name in ("C_re", "C_im"):
            return NamedSharding(mesh, P("model", None))
        return NamedSharding(mesh, P())

    p_sh = jax.tree_util.tree_map_with_path(spec, params)
    o_sh = jax.tree_util.tree_map_with_path(spec, opt_state)
    b_sh = NamedSharding(mesh, P("data"))
    params, opt_state = jax.device_put(params, p_sh), jax.device_put(opt_state, o_sh)
    x = jax.device_put(rand.normal((d["batch"], d["seq"], D)), b_sh)
    y = jax.device_put(rand.normal((d["batch"], 1)), b_sh)

    def step(params, opt_state, x, y):
        loss, grads = jax.value_and_grad(lambda p: jnp.mean((forward(p, x) - y) ** 2))(params)
        updates, opt_state = tx.update(grads, opt_state)
        return optax.apply_updates(params, updates), opt_state, loss

    return Program(
        name=NAME,
        description="LRU layers via lax.associative_scan (complex), adam, state over 'model', 2x4",
        fun=step,
        args=(params, opt_state, x, y),
        in_shardings=(p_sh, o_sh, b_sh, b_sh),
        out_shardings=(p_sh, o_sh, None),
        mesh=mesh,
        donate_argnums=(0, 1),
    )
