"""``bench.first_call`` times a first call (trace, lower, compile, run) of both routes."""

from __future__ import annotations

import json

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


def test_table_joins_runs_and_writes_between_the_markers(tmp_path):
    """Rows of several runs in one table, zoo first, each group's geometric mean; the
    README changes only between the first-call markers."""
    runs = [{"clock": "cpu", "load_average": 20.0, "geomean": 1.0, "rows": [
                {"name": "mlp_megatron", "zoo": False, "jax": 0.1, "shardc": 0.09,
                 "ratio": 0.9}]},
            {"clock": "cpu", "load_average": 30.0, "geomean": 1.0, "rows": [
                {"name": "lm_linen", "zoo": True, "jax": 2.0, "shardc": 2.2, "ratio": 1.1}]}]
    paths = []
    for k, run in enumerate(runs):
        paths.append(str(tmp_path / f"{k}.json"))
        with open(paths[-1], "w") as handle:
            json.dump(run, handle)
    readme = tmp_path / "README.md"
    readme.write_text(f"before\n{first_call.START}\nold\n{first_call.END}\nafter\n")
    first_call.main(["--table", *paths, "--readme", str(readme)])
    text = readme.read_text()
    assert text.startswith("before\n") and text.endswith("after\n") and "old" not in text
    assert "load average 20.0, 30.0" in text
    assert text.index("| lm_linen | 2000.0 | 2200.0 | 1.10× |") < text.index(
        "| mlp_megatron | 100.0 | 90.0 | 0.90× |")
    assert "| **geometric mean, zoo** | | | **1.10×** |" in text
    assert "| **geometric mean, bench/models** | | | **0.90×** |" in text
