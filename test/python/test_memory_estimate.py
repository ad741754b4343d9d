"""Lowered.memory_estimate() against Compiled.memory_analysis() on the benchmark programs."""

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))


@pytest.fixture(scope="module")
def rows():
    from bench import memory_estimate
    from bench.models import make_programs

    return {p.name: memory_estimate.compare(p) for p in make_programs("small")}


def test_arguments_and_outputs_are_exact(rows):
    assert len(rows) >= 10
    for row in rows.values():
        assert row.estimate["argument"] == row.xla["argument"], row.name
        assert row.estimate["output"] == row.xla["output"], row.name


def test_total_within_ten_percent_or_explained(rows):
    from bench import memory_estimate

    within = [r.name for r in rows.values() if r.within_tolerance]
    assert {"transformer", "mlp_megatron", "embedding_scatter", "moe_routing"} <= set(within)
    for row in rows.values():
        assert row.within_tolerance or row.name in memory_estimate.EXPLAINED, row.name
    table = memory_estimate.format_table(list(rows.values()))
    assert "UNEXPLAINED" not in table and all(name in table for name in rows)


def test_estimate_report_names_peak_and_largest_buffers():
    from bench import memory_estimate
    from bench.models import REGISTRY

    estimate = memory_estimate.lower(REGISTRY["transformer"]("small")).memory_estimate()
    assert estimate.temp_bytes == 16384 and estimate.largest
    text = estimate.format_text()
    assert "peak at" in text and "transformer.py" in text
