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


# The cost-aware issue's conflict programs (dots whose operands disagree) came
# after the memory model: the estimate is 0.58-0.83x of XLA's there and the
# cause is not known yet. Listed exactly, so a fix or a new gap both show up.
NOT_YET_EXPLAINED = {"conflict_mlp", "conflict_attention", "conflict_attention_seq"}


def test_total_within_ten_percent_or_explained(rows):
    from bench import memory_estimate

    within = [r.name for r in rows.values() if r.within_tolerance]
    assert {"transformer", "mlp_megatron", "embedding_scatter", "moe_routing"} <= set(within)
    unexplained = {
        row.name for row in rows.values()
        if not row.within_tolerance and row.name not in memory_estimate.EXPLAINED
    }
    assert unexplained == NOT_YET_EXPLAINED
    table = memory_estimate.format_table(list(rows.values()))
    assert all(name in table for name in rows)


def test_estimate_report_names_peak_and_largest_buffers():
    from bench import memory_estimate
    from bench.models import REGISTRY

    estimate = memory_estimate.lower(REGISTRY["transformer"]("small")).memory_estimate()
    assert estimate.temp_bytes == 16384 and estimate.largest
    text = estimate.format_text()
    assert "peak at" in text and "transformer.py" in text
