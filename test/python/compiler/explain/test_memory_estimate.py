"""Lowered.memory_estimate() against Compiled.memory_analysis() on the benchmark programs."""

import re

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


TRANSFORMER_TEMP = 18432


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


def _update_from_a_gradient(w, x):
    g = x.T @ jnp.tanh(x @ w)  # a buffer of w's shape, read only by the update
    return w - 0.1 * g


def test_output_written_over_the_buffer_it_reads_elementwise():
    # XLA's update fusion reads the gradient element by element and has its shape,
    # so it writes the output over the gradient's buffer (no temporary for it).
    mesh = jax.make_mesh((4, 2), ("data", "model"), axis_types=(jax.sharding.AxisType.Auto,) * 2)
    replicated = NamedSharding(mesh, P())
    lowered = sc.jit(_update_from_a_gradient, in_shardings=(replicated, replicated)).lower(
        jnp.ones((64, 64)), jnp.ones((32, 64)))
    estimate = lowered.memory_estimate()
    stats = lowered.compile().memory_analysis()
    assert estimate.output_bytes == stats.output_size_in_bytes == 16384
    # the temporaries: tanh(x @ w), 32x64 f32; the gradient lives in the output
    assert estimate.temp_bytes == stats.temp_size_in_bytes == 8192


def _scanned_bf16_loss(scales, x):
    def layer(h, s):
        return jnp.sin(h) * s + h, None

    h, _ = jax.lax.scan(layer, x, scales)
    return jnp.sum(h.astype(jnp.float32))


def test_bf16_stacks_a_loop_computes_on_are_converted_whole_before_it():
    # XLA:CPU computes bf16 arithmetic in f32: the backward loop's slices of the
    # saved bf16 stacks are converted as whole stacks before the loop (f32 loop
    # carries), each bf16 stack dying at its convert. Without the rule the
    # estimate was half of XLA's total.
    mesh = jax.make_mesh((4, 2), ("data", "model"), axis_types=(jax.sharding.AxisType.Auto,) * 2)
    step = sc.jit(jax.grad(_scanned_bf16_loss, argnums=(0, 1)),
                  in_shardings=(NamedSharding(mesh, P()), NamedSharding(mesh, P("data"))))
    lowered = step.lower(jnp.ones((4, 256), jnp.bfloat16), jnp.ones((256, 256), jnp.bfloat16))
    estimate = lowered.memory_estimate()
    stats = lowered.compile().memory_analysis()
    xla = (stats.argument_size_in_bytes + stats.output_size_in_bytes
           + stats.temp_size_in_bytes - stats.alias_size_in_bytes)
    assert abs(estimate.net_bytes / xla - 1) <= 0.10, (estimate.net_bytes, xla)
    # two saved stacks of 4 x 64 x 256 per device, in f32 while the loop runs
    assert estimate.temp_bytes >= 2 * 4 * 64 * 256 * 4


def _fast_and_slow(fast, slow):
    new_fast = fast - 0.1 * jnp.tanh(slow)
    return new_fast, slow + 0.5 * (new_fast - slow) + fast @ slow


def test_donated_argument_read_after_its_output_is_written_is_copied():
    # new_fast is written into fast's buffer before the slow update's dot reads
    # fast: XLA copies fast first (lookahead's fast and slow parameters are
    # updated so); without the copy the estimate was half of XLA's temporaries.
    mesh = jax.make_mesh((4, 2), ("data", "model"), axis_types=(jax.sharding.AxisType.Auto,) * 2)
    replicated = NamedSharding(mesh, P())
    lowered = sc.jit(_fast_and_slow, in_shardings=(replicated, replicated),
                     donate_argnums=(0, 1)).lower(
        jnp.ones((64, 64)), jnp.ones((64, 64)))
    estimate = lowered.memory_estimate()
    stats = lowered.compile().memory_analysis()
    assert estimate.alias_bytes == stats.alias_size_in_bytes == 2 * 16384
    assert estimate.temp_bytes == stats.temp_size_in_bytes == 2 * 16384


def _skipped_update(params_first):
    def step(p, m, g):
        # jmp's loss-scale skip: both outputs keep the old value where a gradient
        # is not finite, and XLA computes the momentum again inside the parameter's
        # fusion, so that fusion reads the donated m whatever the outputs' order
        ok = jnp.all(jnp.isfinite(g))
        new_m = 0.9 * m + g
        new_p = p - 0.1 * new_m
        kept = jnp.where(ok, new_p, p), jnp.where(ok, new_m, m)
        return kept if params_first else kept[::-1]
    return step


@pytest.mark.parametrize("params_first", [True, False])
def test_donated_argument_read_by_a_kernel_its_output_does_not_wait_for_is_copied(
        params_first):
    # XLA's copy insertion orders kernels by their dependencies, not as listed: the
    # parameter's update reads m and m's update does not depend on it, so m is
    # copied first whichever is listed first (the estimate followed the listing and
    # missed the copy when the parameter's update came first, or counted one copy
    # of two when it came second: jmp_bf16_loss_scale's optimizer state).
    mesh = jax.make_mesh((4, 2), ("data", "model"), axis_types=(jax.sharding.AxisType.Auto,) * 2)
    replicated = NamedSharding(mesh, P())
    lowered = sc.jit(_skipped_update(params_first), in_shardings=(replicated,) * 3,
                     donate_argnums=(0, 1)).lower(*(jnp.ones((64, 64)),) * 3)
    estimate = lowered.memory_estimate()
    ratio = estimate.compare(lowered.compile().memory_analysis())
    assert ratio["alias"] == 1.0
    assert 0.9 <= ratio["net"] <= 1.1, ratio


def _embedding_sgd_step(frozen_embedding):
    def loss(params, ids, y):
        x = params["table"][ids]  # a gather reading the donated table
        h = jnp.tanh(x @ params["w1"])
        return jnp.mean((h @ params["w2"] - y) ** 2)

    def step(params, ids, y):
        grads = jax.grad(loss)(params, ids, y)
        if frozen_embedding:
            # optax.set_to_zero's update: the table plus zeros
            grads = dict(grads, table=jnp.zeros_like(params["table"]))
        return jax.tree.map(lambda p, g: p - 0.1 * g if g is not None else p, params, grads)
    return step


@pytest.mark.parametrize("frozen_embedding", [False, True])
def test_donated_weights_read_before_a_combined_all_reduce_are_not_copied(frozen_embedding):
    # w2's update does not depend on the input gradient's dot reading w2, but both
    # weights' gradients are summed by one combined all-reduce, which waits for
    # w1's gradient and so for that dot: no copy (data-parallel steps: lm_linen,
    # flax_nnx_sharded, eqx_partition_jit). A frozen table's update is the table
    # (XLA's ``A + 0 => A``): nothing is written over it, no copy for its gather.
    mesh = jax.make_mesh((4, 2), ("data", "model"), axis_types=(jax.sharding.AxisType.Auto,) * 2)
    replicated = NamedSharding(mesh, P())
    batch = NamedSharding(mesh, P("data"))
    params = {"table": jnp.ones((64, 64)), "w1": jnp.ones((64, 64)), "w2": jnp.ones((64, 64))}
    lowered = sc.jit(_embedding_sgd_step(frozen_embedding),
                     in_shardings=(replicated, batch, batch), donate_argnums=(0,)).lower(
        params, jnp.zeros((32,), jnp.int32), jnp.ones((32, 64)))
    estimate = lowered.memory_estimate()
    compiled = lowered.compile()
    stats = compiled.memory_analysis()
    assert not re.search(r"copy\(%param[.\d]*\)", compiled.as_text())  # no argument copied
    ratio = estimate.compare(stats)
    assert ratio["alias"] == 1.0
    assert abs(estimate.temp_bytes / stats.temp_size_in_bytes - 1) <= 0.10, (
        estimate.temp_bytes, stats.temp_size_in_bytes)


def _scaled_after_its_dot(a, x):
    y = jnp.tanh(x @ a)  # a's one reader besides its update
    z = jnp.sort(y, axis=0)  # sorted after the dot, whatever a's update waits for
    return a * 0.9, jnp.sum(z * y)


def test_donated_argument_copy_dies_at_its_last_reader_but_the_writer():
    # a's update does not wait for the dot, so XLA copies a; the dot reads the copy,
    # which dies there, and the update scales a in place: the copy is not live while
    # the sort runs (the estimate kept it until the update: 1.125x XLA's temp;
    # nnx_seq_remat_filters' copy.54 lives 67-93 of 348, its update at the end).
    mesh = jax.make_mesh((4, 2), ("data", "model"), axis_types=(jax.sharding.AxisType.Auto,) * 2)
    replicated = NamedSharding(mesh, P())
    lowered = sc.jit(_scaled_after_its_dot, in_shardings=(replicated, replicated),
                     donate_argnums=(0,)).lower(jnp.ones((128, 128)), jnp.ones((512, 128)))
    estimate = lowered.memory_estimate()
    compiled = lowered.compile()
    stats = compiled.memory_analysis()
    assert re.search(r"copy\(%param[.\d]*\)", compiled.as_text())  # a is copied
    assert abs(estimate.temp_bytes / stats.temp_size_in_bytes - 1) <= 0.05, (
        estimate.temp_bytes, stats.temp_size_in_bytes)


def _chain_after_the_donated_weight(w, x):
    h = jnp.tanh(x @ w)  # w's last reader
    g = jnp.tanh(h @ x.T)
    k = jnp.tanh(g @ h)
    return k.T @ k, jnp.sum(h)


def test_temporaries_fill_a_donated_arguments_buffer_after_its_last_read():
    # The first output reuses the donated w's buffer; between w's last reader and
    # that output XLA places temporaries there (the estimate counted them in the
    # heap: twice XLA's temporaries).
    mesh = jax.make_mesh((4, 2), ("data", "model"), axis_types=(jax.sharding.AxisType.Auto,) * 2)
    replicated = NamedSharding(mesh, P())
    lowered = sc.jit(_chain_after_the_donated_weight, in_shardings=(replicated, replicated),
                     donate_argnums=(0,)).lower(jnp.ones((64, 64)), jnp.ones((64, 64)))
    estimate = lowered.memory_estimate()
    stats = lowered.compile().memory_analysis()
    assert estimate.alias_bytes == stats.alias_size_in_bytes == 16384
    assert estimate.temp_bytes == stats.temp_size_in_bytes == 32768


def _lookup_in_transposed_table(table, ids):
    return jnp.take(table.T, ids, axis=0) * 2.0


def test_gather_fuses_its_operands_producer_on_cpu():
    # XLA:CPU fuses a gather with the transpose of its table (and its elementwise
    # readers): the transposed table is never a buffer (it was the estimate's
    # whole temporary, 32 KiB, where XLA has none).
    mesh = jax.make_mesh((4, 2), ("data", "model"), axis_types=(jax.sharding.AxisType.Auto,) * 2)
    replicated = NamedSharding(mesh, P())
    lowered = sc.jit(_lookup_in_transposed_table, in_shardings=(replicated, replicated)).lower(
        jnp.ones((64, 128)), jnp.arange(16) % 128)
    estimate = lowered.memory_estimate()
    stats = lowered.compile().memory_analysis()
    assert stats.temp_size_in_bytes == 0
    assert estimate.temp_bytes < 64 * 128 * 4 // 8  # no transposed table


def _rows_per_index(table, ids):
    return jnp.tanh(table[ids] * 2.0) @ jnp.ones((64, 64))


def test_lookup_passing_its_indices_sharding_on_sums_nothing():
    # A table sharded on its rows, looked up by indices sharded alike: XLA's gather
    # handler all-gathers the table and looks up each device's indices (jraph's node
    # features per edge), no partial lookups summed. The estimate all-reduced the
    # whole [2048,64] lookup as the factor model's reduced rows (2.33x XLA's net).
    mesh = jax.make_mesh((8,), ("data",), axis_types=(jax.sharding.AxisType.Auto,))
    rows = NamedSharding(mesh, P("data"))
    lowered = sc.jit(_rows_per_index, in_shardings=(rows, rows), out_shardings=rows).lower(
        jnp.ones((512, 64)), jnp.arange(2048, dtype=jnp.int32) % 512)
    estimate = lowered.memory_estimate()
    stats = lowered.compile().memory_analysis()
    assert estimate.temp_bytes == pytest.approx(stats.temp_size_in_bytes, rel=0.1)


def _label_gradient(logits, labels):
    picked = jnp.take_along_axis(logits, labels[..., None], axis=-1)
    return jax.grad(lambda x: jnp.sum(jnp.take_along_axis(x, labels[..., None], axis=-1) ** 2))(
        logits), picked


def test_scatter_add_into_zeros_is_written_in_its_output():
    # The gradient of take_along_axis scatters into zeros: XLA writes the zeros into
    # the output's buffer and scatters there in place (the estimate kept the zeros
    # as a temporary of the output's size).
    mesh = jax.make_mesh((4, 2), ("data", "model"), axis_types=(jax.sharding.AxisType.Auto,) * 2)
    sharded = NamedSharding(mesh, P("data", None, "model"))
    step = sc.jit(_label_gradient, in_shardings=(sharded, NamedSharding(mesh, P("data"))),
                  out_shardings=(sharded, NamedSharding(mesh, P("data"))))
    lowered = step.lower(jnp.ones((8, 16, 64)), jnp.zeros((8, 16), jnp.int32))
    estimate = lowered.memory_estimate()
    stats = lowered.compile().memory_analysis()
    assert estimate.output_bytes == stats.output_size_in_bytes
    assert estimate.temp_bytes <= stats.temp_size_in_bytes < 2 * 16 * 32 * 4


# Other libraries' programs the rules were not read from at first, within 10% of
# XLA's total since the rules above (penzai_named_lm also by building a broadcast
# constant at the sharding its scatter needs, without a gather).
LIBZOO_WITHIN = ("penzai_named_lm", "penzai_kv_decode", "optax_lookahead_inject",
                 "optax_multisteps", "jax_host_callback_scan", "eqx_batchnorm_state")


@pytest.mark.parametrize("name", LIBZOO_WITHIN)
def test_libzoo_net_total_within_ten_percent(name):
    from bench import memory_estimate

    (program,) = memory_estimate.make_programs("small", [name])
    row = memory_estimate.compare(program)
    assert row.estimate["alias"] == row.xla["alias"], row
    assert row.within_tolerance, row


def _net(stats) -> int:
    return (stats.argument_size_in_bytes + stats.output_size_in_bytes
            + stats.temp_size_in_bytes - stats.alias_size_in_bytes)


def _rematerialised_scan(ws, x):
    def layer(h, w):
        return jnp.tanh(h @ w) + h, None

    h, _ = jax.lax.scan(jax.checkpoint(layer), x, ws)
    return jnp.sum(h.astype(jnp.float32))


def test_convert_behind_a_checkpoint_barrier_is_hoisted_out_of_the_loop():
    # jax.checkpoint puts an optimization barrier around the layer's inputs; XLA
    # expands it before hoisting the loop-invariant convert of the bf16 weight
    # stack, so the backward loop reads the whole stack converted to f32
    # (wrapped_convert, f32[16,256,128] per device) like an unrematerialised one.
    mesh = jax.make_mesh((4, 2), ("data", "model"), axis_types=(jax.sharding.AxisType.Auto,) * 2)
    step = sc.jit(jax.grad(_rematerialised_scan),
                  in_shardings=(NamedSharding(mesh, P(None, None, "model")),
                                NamedSharding(mesh, P("data"))))
    lowered = step.lower(jnp.ones((16, 256, 256), jnp.bfloat16), jnp.ones((16, 256), jnp.bfloat16))
    estimate = lowered.memory_estimate()
    stats = lowered.compile().memory_analysis()
    assert abs(estimate.net_bytes / _net(stats) - 1) <= 0.10, (estimate.net_bytes, _net(stats))
    wide_stack = 16 * 256 * 128 * 4
    assert stats.temp_size_in_bytes >= wide_stack and estimate.temp_bytes >= wide_stack


def _lookup_loss(mesh):
    def loss(table, ids):
        x = jnp.take(table, ids, axis=0)
        x = jax.lax.with_sharding_constraint(x, NamedSharding(mesh, P("data", None, None)))
        return jnp.sum(jnp.tanh(x) * x)
    return loss


def test_lookup_reshards_as_xlas_gather_handler_plans():
    # A table sharded over rows ("model") and columns ("data"), ids over "data":
    # XLA's gather handler looks the rows up where the table lies (a select and an
    # all-reduce of f32[4,64,64]) and all-to-alls them to the batch; the estimate
    # gathered the table's rows (256 KiB and its transposed copy) as the factor
    # model reshards, 1.23x XLA's temporaries.
    mesh = jax.make_mesh((4, 2), ("data", "model"), axis_types=(jax.sharding.AxisType.Auto,) * 2)
    step = sc.jit(jax.grad(_lookup_loss(mesh)),
                  in_shardings=(NamedSharding(mesh, P("model", "data")),
                                NamedSharding(mesh, P("data"))))
    lowered = step.lower(jnp.ones((512, 256)), jnp.zeros((4, 64), jnp.int32))
    estimate = lowered.memory_estimate()
    compiled = lowered.compile()
    stats = compiled.memory_analysis()
    assert "all-to-all" in compiled.as_text()
    assert abs(estimate.temp_bytes / stats.temp_size_in_bytes - 1) <= 0.10, (
        estimate.temp_bytes, stats.temp_size_in_bytes)
    assert abs(estimate.net_bytes / _net(stats) - 1) <= 0.10


def _projected_lookup(mesh):
    def loss(w, table, ids):
        x = jnp.take(table, ids, axis=0)
        x = jax.lax.with_sharding_constraint(x, NamedSharding(mesh, P("data", None, None)))
        return jnp.sum(jnp.tanh(x @ w) * x)
    return loss


def test_rows_all_to_alled_to_the_batch_are_a_buffer_for_their_dots():
    # The all-to-all writes the looked-up rows (XLA:CPU: its pieces concatenated,
    # ``concatenate``, then copied into the result's layout, ``select_bitcast_fusion``,
    # the buffer the forward and the weight gradient's dots read): the lookup is not
    # fused into its readers as a local gather is.
    mesh = jax.make_mesh((4, 2), ("data", "model"), axis_types=(jax.sharding.AxisType.Auto,) * 2)
    step = sc.jit(jax.grad(_projected_lookup(mesh)),
                  in_shardings=(NamedSharding(mesh, P()), NamedSharding(mesh, P("model", "data")),
                                NamedSharding(mesh, P("data"))))
    lowered = step.lower(jnp.ones((256, 256)), jnp.ones((512, 256)), jnp.zeros((4, 64), jnp.int32))
    estimate = lowered.memory_estimate()
    compiled = lowered.compile()
    stats = compiled.memory_analysis()
    assert "concatenate(" in compiled.as_text()
    assert abs(estimate.net_bytes / _net(stats) - 1) <= 0.10, (estimate.net_bytes, _net(stats))


def _constrained_gated_mlp(mesh):
    def loss(w1, w2, x):
        h = x @ w1
        gated = jax.nn.silu(h[..., :256]) * h[..., 256:]
        gated = jax.lax.with_sharding_constraint(gated, NamedSharding(mesh, P("data", "model")))
        return jnp.sum(jnp.tanh(gated @ w2))
    return loss


def test_constrained_value_read_by_dots_is_a_buffer():
    # A sharding constraint passes its operand on: the gated activation, read through
    # it by the forward's dot and the backward's weight-gradient dot, is a buffer
    # (XLA's multiply fusion) from one to the other, as it is unconstrained; the
    # model saw the constraint as a fusing reader and counted none (0.75x XLA's temp).
    mesh = jax.make_mesh((4, 2), ("data", "model"), axis_types=(jax.sharding.AxisType.Auto,) * 2)
    step = sc.jit(jax.grad(_constrained_gated_mlp(mesh), argnums=(0, 1)),
                  in_shardings=(NamedSharding(mesh, P()), NamedSharding(mesh, P("model", None)),
                                NamedSharding(mesh, P("data"))))
    lowered = step.lower(jnp.ones((128, 512)), jnp.ones((256, 128)), jnp.ones((256, 128)))
    estimate = lowered.memory_estimate()
    stats = lowered.compile().memory_analysis()
    assert abs(estimate.temp_bytes / stats.temp_size_in_bytes - 1) <= 0.05, (
        estimate.temp_bytes, stats.temp_size_in_bytes)


def _split_gated_mlp(w1, w2, x):
    g, u = jnp.split(x @ w1, 2, -1)
    return jnp.sum(jnp.tanh((jax.nn.silu(g) * u) @ w2))


def test_halo_exchange_of_a_split_is_a_buffer_its_readers_slice():
    # Splitting a dimension sharded over "model" in halves moves half of each shard to
    # the neighbour: XLA's slice handler concatenates the neighbour's halo and its
    # own part (f32[64,256] per device, twice the half's shard), and each reader
    # fuses its dynamic-slice of it; XLA:CPU writes each concatenate as a kernel
    # of its own, a buffer (the model fused the slices away: half XLA's temp).
    mesh = jax.make_mesh((4, 2), ("data", "model"), axis_types=(jax.sharding.AxisType.Auto,) * 2)
    step = sc.jit(_split_gated_mlp, in_shardings=(
        NamedSharding(mesh, P(None, "model")), NamedSharding(mesh, P("model", None)),
        NamedSharding(mesh, P("data"))))
    lowered = step.lower(jnp.ones((128, 512)), jnp.ones((256, 128)), jnp.ones((256, 128)))
    estimate = lowered.memory_estimate()
    compiled = lowered.compile()
    stats = compiled.memory_analysis()
    text = compiled.as_text()
    assert text.count("f32[64,256]{1,0} concatenate(") == 2 and "collective-permute" in text
    assert abs(estimate.temp_bytes / stats.temp_size_in_bytes - 1) <= 0.05, (
        estimate.temp_bytes, stats.temp_size_in_bytes)


def _loops_from_constrained_zeros(mesh):
    def loss(ws, x):
        zeros = jax.lax.with_sharding_constraint(jnp.zeros((4, 256, 128)),
                                                 NamedSharding(mesh, P(None, "model")))
        a = jax.lax.fori_loop(0, 4, lambda i, acc: acc.at[i].add(jnp.tanh(ws[i] * x)), zeros)
        b = jax.lax.fori_loop(0, 4, lambda i, acc: acc.at[i].add(jnp.sin(a[i])), zeros)
        return jnp.sum(a * b + zeros * 2.0)
    return loss


def test_constrained_zeros_two_loops_start_from_is_one_buffer_their_carries_copy():
    # XLA keeps one zero broadcast for the loops (its copies are their carries, the
    # last loop's written over it) and fuses a broadcast of its own into the add; the
    # model read the constraint between them as hiding the loops' in-place update and
    # kept the broadcast live to the add beside both loops' carries (1.38x XLA's net).
    mesh = jax.make_mesh((4, 2), ("data", "model"), axis_types=(jax.sharding.AxisType.Auto,) * 2)
    step = sc.jit(_loops_from_constrained_zeros(mesh),
                  in_shardings=(NamedSharding(mesh, P(None, "model")),
                                NamedSharding(mesh, P("model"))))
    lowered = step.lower(jnp.ones((4, 256, 128)), jnp.ones((256, 128)))
    estimate = lowered.memory_estimate()
    stats = lowered.compile().memory_analysis()
    assert abs(estimate.net_bytes / _net(stats) - 1) <= 0.10, (estimate.net_bytes, _net(stats))


def _outer_products_summed_in_a_loop(a, b, acc):
    def body(i, carry):
        return carry + jnp.einsum("bi,bj->bij", jnp.sin(a * i), b)
    return jnp.sum(jax.lax.fori_loop(0, 4, body, acc) ** 2)


def test_outer_product_is_a_multiply_fused_into_its_reader():
    # XLA's algebraic simplifier rewrites a dot contracting nothing as a multiply of
    # broadcasts: the loop body's add fuses it and writes the sum over its carry; read
    # as a dot it was a buffer of the carry's size beside it (1.5x XLA's net).
    mesh = jax.make_mesh((4, 2), ("data", "model"), axis_types=(jax.sharding.AxisType.Auto,) * 2)
    step = sc.jit(_outer_products_summed_in_a_loop,
                  in_shardings=(NamedSharding(mesh, P("data")),
                                NamedSharding(mesh, P("data", "model")),
                                NamedSharding(mesh, P("data", None, "model"))))
    lowered = step.lower(jnp.ones((64, 128)), jnp.ones((64, 128)), jnp.ones((64, 128, 128)))
    estimate = lowered.memory_estimate()
    stats = lowered.compile().memory_analysis()
    assert "dot(" not in lowered.compile().as_text()
    assert abs(estimate.temp_bytes / stats.temp_size_in_bytes - 1) <= 0.05, (
        estimate.temp_bytes, stats.temp_size_in_bytes)
