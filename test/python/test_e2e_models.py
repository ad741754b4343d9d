"""The model suite (``bench/models``) at its small sizes: shardc against ``jax.jit``.

For every program, shardc's results must equal jax.jit's to within
``RELATIVE_TOLERANCE`` (max |shardc - jax| over max |jax|, per output; float32
programs whose partitioned reductions may run in a different order), and its
partitioned program must move no more collective bytes per device than
jax.jit's. A failure of the second is a propagation bug to report, not a
threshold to loosen. Timing is left to ``bench/e2e.py``.
"""

import math
import pathlib
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
# `bench` has no __init__.py: it is a namespace package importable from the repo root.
sys.path.insert(0, str(ROOT))

from bench import e2e_measure, e2e_table  # noqa: E402
from bench.models import REGISTRY  # noqa: E402

RELATIVE_TOLERANCE = 1e-5
REQUIRED_PROGRAMS = 10


@pytest.fixture(scope="module", params=list(REGISTRY))
def comparison(request) -> e2e_measure.Comparison:
    """Each program compiled once by each route (module scope: shared by the tests)."""
    program = REGISTRY[request.param]("small")
    return e2e_measure.compare(program, repeats=1, time_calls=False, strict=True)


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


def test_suite_has_every_required_program():
    assert len(REGISTRY) >= REQUIRED_PROGRAMS


def test_ratio_handles_zero_jax_figures():
    assert e2e_measure.ratio(0, 0) == 1.0
    assert e2e_measure.ratio(5, 0) is None
    assert math.isclose(e2e_measure.ratio(3, 4), 0.75)
    assert e2e_table.format_ratio(None) == "∞"


def test_table_shows_a_failed_program_with_its_error():
    table = e2e_table.markdown_table([{"name": "broken", "error": "ValueError: bad | spec"}])
    assert "| broken | **failed**: ValueError: bad \\| spec |" in table
