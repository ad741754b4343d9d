"""Lowered.memory_estimate() against Compiled.memory_analysis() on the benchmark programs."""

import jax
import jax.numpy as jnp
import pytest
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

import shardc.compiler as sc


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


TRANSFORMER_TEMP = 24576


def test_estimate_report_names_peak_and_largest_buffers():
    from bench import memory_estimate
    from bench.models import REGISTRY

    estimate = memory_estimate.lower(REGISTRY["transformer"]("small")).memory_estimate()
    assert estimate.temp_bytes == TRANSFORMER_TEMP and estimate.largest
    text = estimate.format_text()
    assert "peak at" in text and "transformer.py" in text


def _sgd_step(params, x):
    def loss(p):
        return jnp.mean((jnp.tanh(x @ p["w1"]) @ p["w2"]) ** 2)

    value, grads = jax.value_and_grad(loss)(params)
    return jax.tree.map(lambda w, g: w - 0.1 * g, params, grads), value


@pytest.mark.parametrize("out_shardings", [False, True], ids=["buffer-donor", "aliasing-output"])
def test_donated_train_step_aliases_like_xla(out_shardings):
    # jax marks the donated parameters jax.buffer_donor without out_shardings (XLA
    # pairs them) and tf.aliasing_output with them; the alias bytes match either way.
    mesh = jax.make_mesh((4, 2), ("data", "model"), axis_types=(jax.sharding.AxisType.Auto,) * 2)
    ps = {"w1": NamedSharding(mesh, P(None, "model")), "w2": NamedSharding(mesh, P("model", None))}
    outs = (ps, NamedSharding(mesh, P())) if out_shardings else None
    step = sc.jit(_sgd_step, in_shardings=(ps, NamedSharding(mesh, P("data", None))),
                  out_shardings=outs, donate_argnums=(0,))
    lowered = step.lower({"w1": jnp.ones((32, 64)), "w2": jnp.ones((64, 32))}, jnp.ones((16, 32)))
    estimate = lowered.memory_estimate()
    stats = lowered.compile().memory_analysis()
    assert estimate.alias_bytes == stats.alias_size_in_bytes == 8192
    assert sorted((a.argument, a.result) for a in estimate.aliases) == [(0, 0), (1, 1)]
    text = estimate.format_text()
    assert "argument 0" in text and "-> result 0" in text and "w1" in text
    assert '"aliases"' in estimate.to_json()


# Small zoo programs (a few seconds each), donation included (decode_kv_cache).
ZOO_WITHIN = ("grad_loops", "grad_loops_unrolled", "dropout_cond", "decode_kv_cache", "vit_bf16")


@pytest.mark.parametrize("name", ZOO_WITHIN)
def test_zoo_net_total_within_ten_percent(name):
    from bench import memory_estimate

    (program,) = memory_estimate.make_programs("small", [name])
    row = memory_estimate.compare(program)
    assert row.estimate["alias"] == row.xla["alias"], row
    assert row.within_tolerance, row
