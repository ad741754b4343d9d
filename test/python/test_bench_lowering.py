"""``bench.lowering`` times both routes and Shardy's C++ pipeline after ``jax.jit``."""

from __future__ import annotations

import jax

from bench import lowering, models


def test_lowering_seconds_times_both_routes_and_the_native_pipeline():
    (program,) = models.make_programs("small", only=["mlp_megatron"])
    seconds = lowering.lowering_seconds(program, rounds=1)
    assert set(seconds) == {"jax", "shardc", "shardy_pipeline"}
    assert all(s > 0 for s in seconds.values())


def test_native_pipeline_runs_on_a_copy_of_jax_jits_module():
    (program,) = models.make_programs("small", only=["mlp_megatron"])
    lowered = jax.jit(program.fun, in_shardings=program.in_shardings,
                      out_shardings=program.out_shardings).lower(*program.args)
    before = lowered.as_text()
    assert lowering.native_pipeline_seconds(lowered, lowering.CLOCKS["cpu"]) > 0
    assert lowered.as_text() == before
