"""Lowered.memory_estimate() against Compiled.memory_analysis() on the benchmark programs."""

import pytest


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


# Every gap beyond 10% is explained in the bench (causes read from XLA's buffer
# assignment); listed exactly, so a new gap shows up.
NOT_YET_EXPLAINED: set[str] = set()
# Within 10% of XLA's total since the model counts reshard buffers (reused,
# arguments' hoisted), transposed copies for batched dots and convolutions,
# combined all-reduces and loop carries in place.
WITHIN = {"transformer", "mlp_megatron", "embedding_scatter", "moe_routing",
          "mlp_data_parallel", "fsdp_train_step", "abstract_mesh_constraint", "scan_rnn",
          "conflict_mlp", "conflict_attention", "conflict_attention_seq"}


def test_total_within_ten_percent_or_explained(rows):
    from bench import memory_estimate

    within = [r.name for r in rows.values() if r.within_tolerance]
    assert WITHIN <= set(within)
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
