"""The model suite (``bench/models``) at its small sizes: shardc against ``jax.jit``.

For every program, shardc's results must equal jax.jit's to within
``RELATIVE_TOLERANCE`` (max |shardc - jax| over max |jax|, per output; float32
programs whose partitioned reductions may run in a different order), and its
partitioned program must move no more collective bytes per device than
jax.jit's. A failure of the second is a propagation bug to report, not a
threshold to loosen. Timing is left to ``bench/e2e.py``.
"""

import dataclasses
import functools
import math

import numpy as np
import pytest

from bench import e2e_measure, e2e_table
from bench.models import REGISTRY
from bench.models.program import Program

RELATIVE_TOLERANCE = 1e-5
REQUIRED_PROGRAMS = 10


@functools.cache
def program_of(name: str) -> Program:
    return REGISTRY[name]("small")


@functools.cache
def built(name: str, route: str) -> e2e_measure.Build:
    """Each program lowered and compiled once by each route, for every test below
    (no warm-up lowering first: no test reads the times)."""
    program = program_of(name)
    with e2e_measure.mesh_context(program):
        return e2e_measure.build(program, route)


@pytest.fixture(scope="module", params=list(REGISTRY))
def comparison(request) -> e2e_measure.Comparison:
    """jax.jit's and shardc's builds of each program, run and compared."""
    program = program_of(request.param)
    builds = {route: built(request.param, route) for route in e2e_measure.ROUTES}
    row = e2e_measure.Comparison(program.name, program.description,
                                 donated=bool(program.donate_argnums))  # fmt: skip
    with e2e_measure.mesh_context(program):
        e2e_measure.record(row, program, builds,
                           {route: b.lower_seconds for route, b in builds.items()},
                           {route: b.compile_seconds for route, b in builds.items()})  # fmt: skip
    return row


def test_numerics_match_jax_jit(comparison):
    assert comparison.max_rel_error <= RELATIVE_TOLERANCE, (
        f"{comparison.name}: max relative error {comparison.max_rel_error:.3g} "
        f"(max abs {comparison.max_abs_error:.3g})"
    )


def test_collective_bytes_at_most_jax_jit(comparison):
    shardc_bytes = comparison.collective_bytes["shardc"]
    jax_bytes = comparison.collective_bytes["jax"]
    assert shardc_bytes <= jax_bytes, (
        f"{comparison.name}: shardc moves {shardc_bytes} collective bytes per device, "
        f"jax.jit {jax_bytes}; shardc {comparison.collectives['shardc']}, "
        f"jax.jit {comparison.collectives['jax']}"
    )


# Programs whose predicted collectives are still off on a route, and why.
PREDICTION_MISSES: dict[tuple[str, str], str] = {}


@pytest.fixture(scope="module", params=[(name, route) for name in REGISTRY
                                        for route in ("shardc", e2e_measure.COST_AWARE)])
def prediction(request) -> tuple[str, str, dict, dict]:
    """Each program lowered and compiled by each shardc route: what shardc predicted
    and the collective bytes per kind XLA compiled."""
    name, route = request.param
    build = built(name, route)
    compiled = {kind: s.bytes_per_device
                for kind, s in e2e_measure.collectives_of(build.compiled).items() if s.count}
    return name, route, e2e_measure.predict(build.lowered), compiled


def test_predicted_collectives_match_what_xla_compiled(prediction):
    """``comm_report()`` within 5% of XLA's bytes per collective kind, on both routes;
    a listed miss must still be off (the list cannot go stale)."""
    name, route, predicted, compiled = prediction
    off = e2e_measure.kinds_off(predicted["collectives"], compiled)
    if (name, route) in PREDICTION_MISSES:
        assert off, f"{name} ({route}) is now predicted: drop it from PREDICTION_MISSES"
    else:
        assert not off, f"{name} ({route}): (kind, predicted, compiled) {off}"


def test_suite_has_every_required_program():
    assert len(REGISTRY) >= REQUIRED_PROGRAMS


def test_ratio_handles_zero_jax_figures():
    assert e2e_measure.ratio(0, 0) == 1.0
    assert e2e_measure.ratio(5, 0) is None
    assert math.isclose(e2e_measure.ratio(3, 4), 0.75)
    assert e2e_table.format_ratio(None) == "∞"


def test_errors_of_complex_outputs_count_the_imaginary_part():
    expected = np.array([1 + 2j, 3 - 1j], np.complex64)
    assert e2e_measure.errors_of(expected, expected.copy()) == (0.0, 0.0)
    imaginary_off = expected + np.array([0.5j, 0], np.complex64)
    worst_abs, worst_rel = e2e_measure.errors_of(expected, imaginary_off)
    assert math.isclose(worst_abs, 0.5)
    assert math.isclose(worst_rel, 0.5 / abs(3 - 1j), rel_tol=1e-6)


def test_table_shows_a_failed_program_with_its_error():
    table = e2e_table.markdown_table([{"name": "broken", "error": "ValueError: bad | spec"}])
    assert "| broken | **failed**: ValueError: bad \\| spec |" in table


def _row(name: str, cost_aware: bool) -> dict:
    """A measured row as ``bench/e2e.py`` writes it (no compilation)."""
    routes = ("jax", "shardc", "cost-aware") if cost_aware else ("jax", "shardc")
    row = e2e_measure.Comparison(
        name, "", max_abs_error=0.0, max_rel_error=0.0, output_shardings_match=True,
        collective_bytes=dict(zip(routes, (4096, 4096, 1024))), collective_bytes_ratio=1.0,
        memory_bytes=dict.fromkeys(routes, 2048), memory_ratio=1.0,
        lower_seconds=dict(zip(routes, (0.01, 0.02, 0.08))), lower_ratio=2.0,
        compile_seconds=dict.fromkeys(routes, 0.1), compile_ratio=1.0,
    )  # fmt: skip
    if cost_aware:
        row.cost_aware_max_rel_error, row.cost_aware_bytes_ratio = 1e-7, 0.25
        row.cost_aware_memory_ratio, row.cost_aware_lower_ratio = 1.0, 4.0
    return dataclasses.asdict(row)


def _cells(line: str) -> list[str]:
    return [cell.strip() for cell in line.strip("|").split("|")]


def test_table_has_cost_aware_columns_only_when_measured():
    plain = e2e_table.markdown_table([_row("a", False)]).splitlines()
    assert "cost-aware" not in plain[0] and len(_cells(plain[0])) == 8
    assert "cost-aware" not in e2e_table.footnote([_row("a", False)])

    rows = [_row("a", True), _row("b", False), {"name": "c", "error": "boom"}]
    lines = e2e_table.markdown_table(rows).splitlines()
    assert all(len(_cells(line)) == 11 for line in lines), lines
    assert _cells(lines[0])[1] == "max rel. error (shardc / cost-aware)"
    ratios = ["0.25×", "1.00×", "4.00×"]
    assert _cells(lines[2])[1] == "0 / 1.0e-07" and _cells(lines[2])[8:] == ratios
    assert _cells(lines[3])[1] == "0 / —" and _cells(lines[3])[8:] == ["—"] * 3
    assert _cells(lines[4])[:2] == ["c", "**failed**: boom"]
    assert _cells(lines[5])[8:] == ratios  # the geometric means skip rows without them
    assert "propagation=\"cost-aware\"" in e2e_table.footnote(rows)


def test_transformer_table_rows_and_failures():
    rows = [
        {"layers": 32, "ops": 2200, "repeats": 3, "lower_seconds": {"shardy": 0.5,
         "cost-aware": 20.0}, "ratio": 40.0, "evaluations": 12, "region_evaluations": 5,
         "predicted_bytes": {"shardy": 2048, "cost-aware": 1024}},
        {"layers": 128, "error": "MemoryError: too big"},
    ]  # fmt: skip
    lines = e2e_table.transformer_table(rows).splitlines()
    assert all(len(_cells(line)) == 7 for line in lines), lines
    assert _cells(lines[2]) == ["32", "2200", "500.0 ms", "20.00 s", "40.00×", "12 + 5",
                                "2.0 KiB → 1.0 KiB"]
    assert _cells(lines[3])[:2] == ["128", "**failed**: MemoryError: too big"]
