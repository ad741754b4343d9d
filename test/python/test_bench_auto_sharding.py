"""``bench/auto_sharding.py``: its rows for one program, compiled and predicted."""

import jax
import pytest

from bench import auto_sharding
from bench.auto_programs import CONFIGS, PROGRAMS, layout_for


def test_data_parallel_cnn_only_all_reduces_its_gradients():
    row = auto_sharding.measure("cnn", "2x4", "dp")
    assert set(row["collectives"]) == {"all-reduce"}
    assert abs(row["model_flops_error"]) <= 0.05
    # the modelled step reads the same module: its bytes are comm_report's
    assert row["step"]["bytes"] == row["collectives"]["all-reduce"]


def test_expert_layout_shards_weights_fsdp_by_tp():
    mesh = auto_sharding.make_mesh("2x2x2")
    _, (params, tokens) = PROGRAMS["llama"].make(layout_for(mesh, "expert"), "small")
    wq = params["layers"][0]["attn"]["wq"].sharding.spec
    assert tuple(wq) == ("fsdp", "model")
    assert tuple(tokens.sharding.spec)[0] == ("data", "fsdp")
    _, (params, tokens) = PROGRAMS["llama"].make(layout_for(mesh, "dp"), "small")
    assert tuple(params["out"].sharding.spec) == ()
    assert tuple(tokens.sharding.spec)[0] == ("data", "fsdp", "model")
    with pytest.raises(ValueError, match="config must be one of"):
        layout_for(mesh, "zero")


def test_abstract_mesh_rows_are_predicted_and_auto_is_na_without_it():
    row = auto_sharding.measure("cnn", "256", "expert")
    assert not row["compiled"] and row["step"]["platform"] == "tpu v5e"
    assert row["step_gpu"]["platform"] == "gpu h100" and row["memory"] > 0
    table = auto_sharding.format_table([row])
    if auto_sharding.auto_available() is None:
        assert table.splitlines()[-1].endswith("| n/a |")
    assert set(CONFIGS) == {"expert", "dp", "shardy"}
    assert jax.device_count() == 8


@pytest.mark.parametrize("program", sorted(PROGRAMS))
def test_every_program_traces_under_every_configuration(program):
    # A held-out program added to the benchmark is a train step of the declared form
    # under each layout: parameters back in their own shapes, a scalar loss.
    mesh = auto_sharding.make_mesh("2x2x2")
    for config in CONFIGS:
        step, (params, batch) = PROGRAMS[program].make(layout_for(mesh, config), "small")
        new_params, loss = jax.eval_shape(step, params, batch)
        assert loss.shape == ()
        assert jax.tree.map(lambda a: a.shape, new_params) == jax.tree.map(
            lambda a: a.shape, params)
