"""``bench.first_call`` times a first call (trace, lower, compile, run) of both routes."""

from __future__ import annotations

import jax
import numpy as np

from bench import e2e_measure, first_call, models


def test_first_call_seconds_runs_each_route_on_a_fresh_function():
    (program,) = models.make_programs("small", only=["mlp_megatron"])
    seconds = first_call.measure(program, rounds=1, clock=first_call.CLOCKS["cpu"])
    assert set(seconds) == {"jax", "shardc"}
    assert all(s > 0 for s in seconds.values())


def test_both_routes_compute_what_jax_jit_computes():
    """What the benchmark calls is the program as its users jit it, on both routes."""
    (program,) = models.make_programs("small", only=["mlp_megatron"])
    results = {route: jax.device_get(jitted(program)(*e2e_measure.call_args(program)))
               for route, jitted in first_call.ROUTES.items()}
    for want, got in zip(jax.tree.leaves(results["jax"]), jax.tree.leaves(results["shardc"])):
        np.testing.assert_allclose(got, want, rtol=1e-6)
