"""NumPyro's NUTS transitions scanned in one jitted call.

A Bayesian linear regression (``numpyro.sample`` of the weights and the noise scale, the
observations in a ``numpyro.plate``) turned into a potential function by
``numpyro.infer.util.initialize_model(..., dynamic_args=True)``; ``numpyro.infer.hmc.hmc(...,
algo="NUTS")`` gives ``init_kernel`` / ``sample_kernel``, and a ``lax.scan`` runs a few
``sample_kernel`` transitions (each one NUTS's iterative tree building: while loops whose trip
counts depend on the data) from the ``HMCState`` namedtuple (positions, energies, a PRNG key)
passed in as the argument. The data are split over ``data`` of an 8-device mesh.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpyro
import numpyro.distributions as dist
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P
from numpyro.infer.hmc import hmc
from numpyro.infer.util import initialize_model

from bench.models.program import Program, RandomArrays, check_size, make_mesh

NAME = "numpyro_nuts_kernel"
SIZES = {"small": dict(n=64, d=4, steps=3), "large": dict(n=4096, d=32, steps=20)}


def make(size: str = "small") -> Program:
    check_size(size)
    dims = SIZES[size]
    mesh = make_mesh((8,), ("data",))

    def model(x, y):
        w = numpyro.sample("w", dist.Normal(jnp.zeros(dims["d"]), 1.0).to_event(1))
        sigma = numpyro.sample("sigma", dist.Exponential(1.0))
        with numpyro.plate("n", x.shape[0]):
            numpyro.sample("y", dist.Normal(x @ w, sigma), obs=y)

    rand = RandomArrays(seed=1505)
    x = rand.normal((dims["n"], dims["d"]))
    y = (x @ rand.normal((dims["d"],)) + 0.3 * rand.normal((dims["n"],))).astype("float32")
    data = NamedSharding(mesh, P("data"))
    x, y = jax.device_put(x, data), jax.device_put(y, data)
    init_params, potential_fn, _, _ = initialize_model(
        jax.random.key(4), model, model_args=(x, y), dynamic_args=True)
    init_kernel, sample_kernel = hmc(potential_fn_gen=potential_fn, algo="NUTS")
    state = init_kernel(init_params, num_warmup=0, step_size=0.1, model_args=(x, y),
                        rng_key=jax.random.key(5))  # fmt: skip

    def run(state, x, y):
        def transition(state, _):
            state = sample_kernel(state, model_args=(x, y))
            return state, (state.z["w"], state.potential_energy, state.num_steps)

        return jax.lax.scan(transition, state, None, length=dims["steps"])

    return Program(
        name=NAME,
        description="numpyro NUTS sample_kernel transitions in a lax.scan, data over 8",
        fun=run,
        args=(state, x, y),
        in_shardings=None,
        out_shardings=None,
        mesh=mesh,
    )
