"""BlackJAX's HMC with its step size adapted by dual averaging, in one ``lax.scan``.

An eight-schools-like hierarchical Gaussian posterior (a mean, a log scale and one effect per
school) as a log density over a dict of positions; each scan step builds ``blackjax.hmc`` with
the current step size ``exp(log_step_size)``, takes one ``step`` (five leapfrog steps) and feeds
its acceptance rate to ``blackjax.adaptation.step_size.dual_averaging_adaptation``'s update,
the way blackjax's adaptation examples write it; the final step size comes from its
``final``. The schools' data and initial effects are split over ``data`` of an 8-device mesh.
"""

from __future__ import annotations

import blackjax
import jax
import jax.numpy as jnp
from blackjax.adaptation.step_size import dual_averaging_adaptation
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from bench.models.program import Program, RandomArrays, check_size, make_mesh

NAME = "blackjax_hmc_adaptation"
SIZES = {"small": dict(schools=16, steps=4), "large": dict(schools=1024, steps=200)}


def make(size: str = "small") -> Program:
    check_size(size)
    dims = SIZES[size]
    mesh = make_mesh((8,), ("data",))
    rand = RandomArrays(seed=1507)
    data = NamedSharding(mesh, P("data"))
    effects = jax.device_put(3.0 * rand.normal((dims["schools"],)), data)
    sigmas = jax.device_put(1.0 + abs(rand.normal((dims["schools"],))), data)
    theta0 = jax.device_put(rand.normal((dims["schools"],)) * 0.1, data)

    def run(theta0, effects, sigmas, key):
        def log_density(p):
            mu, log_tau, theta = p["mu"], p["log_tau"], p["theta"]
            prior = -0.5 * mu**2 / 25 - 0.5 * jnp.exp(log_tau) ** 2 / 25 + log_tau
            hierarchy = jnp.sum(-0.5 * ((theta - mu) / jnp.exp(log_tau)) ** 2 - log_tau)
            return prior + hierarchy + jnp.sum(-0.5 * ((effects - theta) / sigmas) ** 2)

        inverse_mass = jnp.ones(dims["schools"] + 2)
        da_init, da_update, da_final = dual_averaging_adaptation(target=0.8)

        def step(carry, key):
            state, da = carry
            kernel = blackjax.hmc(log_density, step_size=jnp.exp(da.log_step_size),
                                  inverse_mass_matrix=inverse_mass, num_integration_steps=5)  # fmt: skip
            state, info = kernel.step(key, state)
            return (state, da_update(da, info.acceptance_rate)), state.position["mu"]

        position = {"mu": jnp.zeros(()), "log_tau": jnp.zeros(()), "theta": theta0}
        state = blackjax.hmc(log_density, 0.1, inverse_mass, 5).init(position)
        keys = jax.random.split(key, dims["steps"])
        (state, da), mus = jax.lax.scan(step, (state, da_init(0.1)), keys)
        return state.position, mus, da_final(da)

    key = jax.device_put(jax.random.key(7), NamedSharding(mesh, P()))
    return Program(
        name=NAME,
        description="blackjax hmc steps in a lax.scan with dual-averaging step size, data over 8",
        fun=run,
        args=(theta0, effects, sigmas, key),
        in_shardings=None,
        out_shardings=None,
        mesh=mesh,
    )
