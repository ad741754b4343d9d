"""Predictions per platform: ``comm_report(platform=...)`` / ``memory_estimate(platform=...)``.

The CPU figures are compared with XLA:CPU's compiled HLO (unchanged by the platform
argument); the TPU rules are checked here on what each one changes, with the
figures XLA:TPU compiled for a v5e topology (``bench/platforms.py`` measures them
against XLA:TPU itself when libtpu is installed; never in CI).
"""

import dataclasses
import inspect
import math

import jax
import jax.numpy as jnp
import pytest
from jax.sharding import AbstractMesh, AxisType, NamedSharding
from jax.sharding import PartitionSpec as P

from bench import plan_speed
from shardc.compiler import jit
from shardc.compiler.cost.platforms import CPU, PLATFORMS, TPU, platform_rules, predicting_for
from shardc.compiler.explain import memory
from shardc.compiler.explain.reports import ProgramReports
from shardc.compiler.propagation.values import ModuleValues
from shardc.runtime.collectives import find_collectives, summarize

BF16 = jnp.bfloat16
# XLA:TPU's buffers in HBM as where a program's arrays do not all fit on chip: so small a
# program XLA:TPU stages whole through VMEM (``explain.staging``), and the liveness
# rules pinned here are those of larger ones
HBM_ONLY = dataclasses.replace(TPU, stages_in_vmem=False)


@pytest.fixture(scope="module")
def mesh():
    return jax.make_mesh((4, 2), ("data", "model"), axis_types=(AxisType.Auto,) * 2)


def _fsdp_step(params, x):
    def loss(params):
        w1, w2 = params
        return jnp.mean(jnp.tanh(x @ w1) @ w2)
    grads = jax.grad(loss)(params)
    return jax.tree.map(lambda p, g: (p - 0.1 * g).astype(p.dtype), params, grads)


def _lower_fsdp(mesh, dtype=BF16, **lower):
    specs = (P("data", "model"), P("model", "data"))
    args = ((jax.ShapeDtypeStruct((64, 128), dtype), jax.ShapeDtypeStruct((128, 64), dtype)),
            jax.ShapeDtypeStruct((32, 64), dtype))
    return jit(_fsdp_step, in_shardings=(specs, P("data")), out_shardings=specs,
               mesh=mesh).trace(*args).lower(**lower)


def _data_parallel(mesh):
    def step(params, x):
        grads = jax.grad(lambda ps: sum(jnp.sum(jnp.tanh(x @ w)) for w in ps))(params)
        return jax.tree.map(lambda p, g: p - g, params, grads)
    params = tuple(jax.ShapeDtypeStruct((64, 64), BF16) for _ in range(3))
    return jit(step, in_shardings=(None, P(("data", "model"))), mesh=mesh).lower(
        params, jax.ShapeDtypeStruct((32, 64), BF16))


def _totals(report):
    return {k: (t.count, t.bytes_per_device) for k, t in report.totals().items() if t.count}


def test_unsupported_platform_is_refused_naming_the_supported(mesh):
    lowered = _lower_fsdp(mesh)
    for call in (lowered.comm_report, lowered.memory_estimate):
        with pytest.raises(ValueError, match=r"\['cpu', 'tpu'\].*not 'gpu'"):
            call(platform="gpu")
    assert sorted(PLATFORMS) == ["cpu", "tpu"]
    assert platform_rules("TPU") is TPU


def test_default_platform_is_the_lowerings(mesh):
    on_cpu = _lower_fsdp(mesh)
    assert on_cpu.target_platform == "cpu"
    assert on_cpu.comm_report() == on_cpu.comm_report(platform="cpu")
    on_tpu = _lower_fsdp(mesh, lowering_platforms=("tpu",))
    assert on_tpu.target_platform == "tpu"
    assert on_tpu.comm_report() == on_tpu.comm_report(platform="tpu")
    assert on_tpu.memory_estimate() == on_tpu.memory_estimate(platform="tpu")
    # The platform changes the prediction, never the module it is made from.
    assert on_tpu.comm_report(platform="cpu") == on_cpu.comm_report()


def test_cpu_numbers_match_xla_cpu_after_a_tpu_prediction(mesh):
    lowered = _lower_fsdp(mesh)
    lowered.comm_report(platform="tpu")  # memoised per op: must not leak into CPU's
    predicted = _totals(lowered.comm_report(platform="cpu"))
    compiled = {k: (s.count, s.bytes_per_device)
                for k, s in lowered.compile().collectives().items() if s.count}
    assert predicted == compiled
    assert "reduce-scatter" not in compiled  # XLA:CPU all-reduces and slices


def test_tpu_moves_bf16_in_two_bytes_and_forms_reduce_scatters(mesh):
    lowered = _lower_fsdp(mesh)
    cpu, tpu = lowered.comm_report(platform="cpu"), lowered.comm_report(platform="tpu")
    # Every collective at half CPU's bytes (bf16 kept, not upcast to f32) ...
    assert sum(e.bytes_per_device for e in tpu.entries) * 2 == sum(
        e.bytes_per_device for e in cpu.entries)
    # ... and the weight gradient's partial sums, sharded over the axis they are
    # reduced over, one reduce-scatter of the all-reduce's buffer (XLA:TPU's
    # all-reduce-scatter fusion), where CPU all-reduces and slices.
    [all_reduce] = [e for e in cpu.entries if e.kind == "all-reduce"]
    [scattered] = [e for e in tpu.entries if e.kind == "reduce-scatter"]
    assert (scattered.op, scattered.loc, scattered.axes) == (
        all_reduce.op, all_reduce.loc, ("data",))
    assert scattered.bytes_per_device * 2 == all_reduce.bytes_per_device
    assert tpu.totals()["all-reduce"].count == cpu.totals()["reduce-scatter"].count == 0


def test_tpu_gathers_f32_dot_operands_in_bf16(mesh):
    f32 = _lower_fsdp(mesh, dtype=jnp.float32)
    bf16 = _lower_fsdp(mesh, dtype=BF16)
    gathered = lambda report: [e.bytes_per_device for e in report.entries  # noqa: E731
                               if e.kind == "all-gather"]
    assert gathered(f32.comm_report(platform="tpu")) == gathered(bf16.comm_report(
        platform="tpu")) == [b // 2 for b in gathered(f32.comm_report(platform="cpu"))]
    # The reduction of f32 partial sums keeps f32, as on CPU.
    assert f32.comm_report(platform="tpu").totals()["reduce-scatter"].bytes_per_device == \
        f32.comm_report(platform="cpu").totals()["all-reduce"].bytes_per_device


def test_tpu_combines_independent_gradient_all_reduces(mesh):
    lowered = _data_parallel(mesh)
    cpu, tpu = lowered.comm_report(platform="cpu"), lowered.comm_report(platform="tpu")
    assert cpu.totals()["all-reduce"].count == 3
    # One combined all-reduce (XLA:TPU's combiner), bytes unchanged but for bf16's size.
    assert _totals(tpu) == {"all-reduce": (1, 3 * 64 * 64 * 2)}
    assert [e.combined for e in tpu.entries] == [False, True, True]
    assert "combined with an earlier all-reduce" in tpu.format_text()


def _weight_gradient(mesh, tokens):
    # The weight gradient of an FSDP x TP dot: partial sums over "data" (the tokens
    # contracted), reduce-scattered onto the weight's ("data", "model") sharding.
    args = (jax.ShapeDtypeStruct((tokens, 256), BF16), jax.ShapeDtypeStruct((tokens, 512), BF16))
    return jit(lambda x, g: jnp.einsum("td,tf->df", x, g),
               in_shardings=(P("data", None), P("data", "model")),
               out_shardings=P("data", "model"), mesh=mesh).lower(*args)


def test_tpu_windows_a_long_contractions_reduce_scatter(mesh):
    # XLA:TPU (v5e 16x16 and 4x4) reduce-scatters a dot contracting 4096 elements
    # and, past that, runs it as a windowed loop: over the n = 4 devices of "data",
    # 2n + 1 collective-permutes of one device's [64, 256] result shard per step.
    short = _totals(_weight_gradient(mesh, 4096).comm_report(platform="tpu"))
    assert short == {"reduce-scatter": (1, 256 * 256 * 2)}
    long = _weight_gradient(mesh, 4224)
    [windowed] = long.comm_report(platform="tpu").entries
    assert (windowed.kind, windowed.axes) == ("collective-permute", ("data",))
    assert windowed.bytes_per_device == (2 * 4 + 1) * 64 * 256 * 2
    assert "windowed loop" in windowed.reason
    # XLA:CPU keeps its all-reduce (of f32) whatever the contraction.
    assert _totals(long.comm_report(platform="cpu")) == {"all-reduce": (1, 256 * 256 * 4)}


@pytest.mark.parametrize("data, windowed", [(16, True), (32, True), (64, False), (128, False)])
def test_tpu_windows_a_loop_over_at_most_32_devices(data, windowed):
    # XLA:TPU on v5e 16x16 (an FSDP x TP weight gradient, x.T @ dy reduce-scattered
    # over "data" onto ("data", "model"), whatever the contraction's length): a
    # windowed loop over 16 or 32 devices, a reduce-scatter over 64 or 128 (its
    # windowed loops run at most ``max_windowed_einsum_iteration`` trips, 32). On an
    # abstract mesh of the pod's 256 devices, as a pod job is planned; Llama-3.2-1B's
    # width, so the shards (16 to 128 rows) are ones XLA:TPU reduce-scatters.
    mesh = AbstractMesh((data, 256 // data), ("data", "model"),
                        axis_types=(AxisType.Auto,) * 2)
    args = (jax.ShapeDtypeStruct((2048 * data, 2048), BF16,
                                 sharding=NamedSharding(mesh, P("data", None))),
            jax.ShapeDtypeStruct((2048 * data, 8192), BF16,
                                 sharding=NamedSharding(mesh, P("data", "model"))))
    lowered = jit(lambda x, g: jnp.einsum("td,tf->df", x, g),
                  out_shardings=NamedSharding(mesh, P("data", "model"))).trace(*args).lower(
        lowering_platforms=("tpu",))
    [entry] = lowered.comm_report(platform="tpu").entries
    shard = 2048 * 8192 // (256 // data) * 2 // data
    if windowed:
        assert (entry.kind, entry.bytes_per_device) == (
            "collective-permute", (2 * data + 1) * shard)
    else:
        assert (entry.kind, entry.bytes_per_device) == ("reduce-scatter", shard * data)


@pytest.mark.parametrize("data, kind", [(2, "reduce-scatter"), (4, "collective-permute")])
def test_tpu_windows_no_reduce_scatter_over_2_devices(data, kind):
    # XLA:TPU on v5e 2x4: a 262144-long contraction's partial sums over the 2 devices
    # of "data" are reduce-scattered whole (over 2 the loop's extra permute costs as much
    # as the overlap saves, whatever the dot's compute), a 65536-long one's over 4 are
    # a windowed loop.
    mesh = AbstractMesh((data, 8 // data), ("data", "model"), axis_types=(AxisType.Auto,) * 2)
    tokens = 131072 * data
    args = (jax.ShapeDtypeStruct((tokens, 256), BF16, sharding=NamedSharding(mesh, P("data"))),
            jax.ShapeDtypeStruct((tokens, 512), BF16,
                                 sharding=NamedSharding(mesh, P("data", "model"))))
    lowered = jit(lambda x, g: jnp.einsum("td,tf->df", x, g),
                  out_shardings=NamedSharding(mesh, P("data", "model"))).trace(*args).lower(
        lowering_platforms=("tpu",))
    [entry] = lowered.comm_report(platform="tpu").entries
    assert (entry.kind, entry.axes) == (kind, ("data",))


@pytest.mark.parametrize("model, kind", [(2, "all-gather"), (8, "collective-permute")])
def test_tpu_windows_no_loop_gather_over_2_devices(model, kind):
    # XLA:TPU on v5e 2x4: a scanned weight gradient (x.T @ dy per step, both sharded on
    # their features over "model", the gradient onto x's) gathers dy over the 2 devices
    # of "model" by an all-gather in the loop body, however long the dot's compute
    # against the gather; over 8 by a windowed loop.
    mesh = AbstractMesh((8 // model, model), ("data", "model"),
                        axis_types=(AxisType.Auto,) * 2)

    def grads(x, dy):
        def body(total, step):
            return total + jnp.einsum("bsi,bso->io", *step), None
        return jax.lax.scan(body, jnp.zeros((x.shape[-1], dy.shape[-1]), x.dtype), (x, dy))[0]

    spec = NamedSharding(mesh, P(None, "data", None, "model"))
    args = (jax.ShapeDtypeStruct((3, 8, 512, 16384), BF16, sharding=spec),
            jax.ShapeDtypeStruct((3, 8, 512, 256), BF16, sharding=spec))
    lowered = jit(grads, out_shardings=NamedSharding(mesh, P("model"))).trace(*args).lower(
        lowering_platforms=("tpu",))
    [gather] = [e for e in lowered.comm_report(platform="tpu").entries
                if e.axes == ("model",) and "operand 1" in e.tensor]
    assert gather.kind == kind


@pytest.mark.parametrize("data, kind", [(128, "reduce-scatter"), (256, "all-reduce")])
def test_tpu_reduce_scatters_over_at_most_128_devices(data, kind):
    # XLA:TPU on v5e 16x16: a weight gradient's partial sums over 128 devices are
    # reduce-scattered (an all-reduce-scatter fusion), over all 256 (pure FSDP)
    # all-reduced and sliced; the bytes are the whole gradient either way.
    mesh = AbstractMesh((data, 256 // data), ("data", "model"),
                        axis_types=(AxisType.Auto,) * 2)
    args = [jax.ShapeDtypeStruct((16 * data, n), BF16,
                                 sharding=NamedSharding(mesh, P("data", None)))
            for n in (2048, 512)]
    lowered = jit(lambda x, g: jnp.einsum("td,tf->df", x, g),
                  out_shardings=NamedSharding(mesh, P("data", None))).trace(*args).lower(
        lowering_platforms=("tpu",))
    assert _totals(lowered.comm_report(platform="tpu")) == {kind: (1, 2048 * 512 * 2)}


@pytest.mark.parametrize("data, rows, columns, dim, kind", [
    (64, 2048, 2944, 0, "reduce-scatter"), (64, 2048, 3712, 0, "all-reduce"),
    (64, 2048, 32000, 0, "reduce-scatter"), (64, 2048, 32064, 0, "all-reduce"),
    (64, 2048, 3000, 0, "reduce-scatter"), (64, 2048, 3660, 0, "all-reduce"),
    (64, 2048, 3712, 1, "reduce-scatter"), (64, 3712, 2048, 1, "all-reduce"),
    (128, 2048, 1664, 0, "reduce-scatter"), (128, 2048, 2176, 0, "all-reduce"),
    (128, 4096, 5504, 0, "all-reduce"), (32, 1024, 8064, 0, "reduce-scatter"),
    (32, 1024, 7808, 0, "all-reduce"), (16, 1024, 8576, 0, "reduce-scatter"),
    (16, 1024, 16256, 0, "all-reduce")])
def test_tpu_forms_a_reduce_scatter_by_its_shards_minor_tiles(data, rows, columns, dim, kind):
    # XLA:TPU on v5e 16x16, a sum over "data" into a result sliced over it: the
    # all-reduce-scatter fusion is formed where the largest prime factor of the
    # shard's minor dimension in 128-wide tiles (the rows where the columns are
    # scattered), times the devices, is at most 1664 (29 x 64 is not; 23 x 64 is;
    # 13 x 128 is, 17 x 128 not), the all-reduce and the slice kept otherwise.
    mesh = AbstractMesh((data, 256 // data), ("data", "model"),
                        axis_types=(AxisType.Auto,) * 2)
    out = P("data", None) if dim == 0 else P(None, "data")
    arg = jax.ShapeDtypeStruct((data, rows, columns), BF16,
                               sharding=NamedSharding(mesh, P("data", None, None)))
    lowered = jit(lambda x: jnp.sum(x, axis=0),
                  out_shardings=NamedSharding(mesh, out)).trace(arg).lower(
        lowering_platforms=("tpu",))
    # (jnp.sum accumulates bf16 in f32: the buffer reduced is f32)
    assert _totals(lowered.comm_report(platform="tpu")) == {kind: (1, rows * columns * 4)}


@pytest.mark.parametrize("data, shard, dim, dtype, kind", [
    (8, (4, 128), 0, jnp.float32, "all-reduce"), (8, (4, 8192), 0, BF16, "all-reduce"),
    (8, (128, 8), 1, jnp.float32, "all-reduce"), (8, (8, 128), 0, BF16, "all-reduce"),
    (8, (8, 256), 0, jnp.float32, "reduce-scatter"), (8, (16, 128), 0, BF16, "reduce-scatter"),
    (8, (128, 16), 1, BF16, "reduce-scatter"), (2, (4, 128), 0, jnp.float32, "all-reduce"),
    (4, (32, 128), 1, jnp.float32, "reduce-scatter"), (2, (1024,), 0, jnp.float32, "all-reduce"),
    (2, (2, 16, 16), 1, jnp.float32, "reduce-scatter"),
    (2, (2, 16, 16), 2, jnp.float32, "all-reduce"),
    (2, (2, 32, 128), 2, jnp.float32, "reduce-scatter"),
    (2, (4, 32, 32), 2, jnp.float32, "all-reduce"),
    (2, (16, 2, 16), 0, jnp.float32, "all-reduce")])
def test_tpu_reduce_scatters_a_shard_of_two_tiles_scattered_on_a_minor_dimension(
        data, shard, dim, dtype, kind):
    # XLA:TPU on v5e 2x4, a sum over "data" (2, 4 or 8 devices) into a result sliced
    # over it: the all-reduce-scatter fusion is formed where the shard, scattered on
    # one of its two minor dimensions, holds two (8, 128) tiles with a whole tile of
    # rows along the scattered one (of rank 3, on the minor one only in whole
    # 128-wide columns), f32 or bf16; elsewhere (a vector, a major dimension, a shard
    # of 4 or 8 rows) the all-reduce of the unsliced result stays.
    mesh = AbstractMesh((data, 8 // data), ("data", "model"), axis_types=(AxisType.Auto,) * 2)
    shape = tuple(n * data if k == dim else n for k, n in enumerate(shard))
    spec = tuple("data" if k == dim else None for k in range(len(shape)))
    arg = jax.ShapeDtypeStruct((data, *shape), dtype,
                               sharding=NamedSharding(mesh, P("data")))
    lowered = jit(lambda x: jnp.sum(x, axis=0, dtype=x.dtype),
                  out_shardings=NamedSharding(mesh, P(*spec))).trace(arg).lower(
        lowering_platforms=("tpu",))
    assert _totals(lowered.comm_report(platform="tpu")) == {
        kind: (1, math.prod(shape) * jnp.dtype(dtype).itemsize)}


@pytest.mark.parametrize("devices, shard, dim, kind", [
    (4, (2, 16, 8), 2, "reduce-scatter"), (8, (4, 17, 16), 2, "reduce-scatter"),
    (4, (1, 17, 16), 2, "reduce-scatter"), (4, (1, 16, 8), 2, "all-reduce"),
    (4, (2, 16, 4), 2, "all-reduce"), (4, (2, 16, 16), 2, "all-reduce"),
    (8, (2, 17, 32), 2, "all-reduce"), (4, (2, 8, 8), 1, "reduce-scatter"),
    (4, (1, 16, 16), 1, "reduce-scatter"), (4, (2, 16, 8), 1, "all-reduce"),
    (4, (2, 17, 32), 1, "all-reduce"), (4, (2, 4, 256), 1, "all-reduce")])
def test_tpu_reduce_scatters_a_rank_3_shard_as_it_lays_its_minor_dimensions_out(
        devices, shard, dim, kind):
    # XLA:TPU on v5e 2x4, a dot's [b, s, f] partial sums over "model" (4 or 8 devices)
    # scattered on f or s: the shard's two minor dimensions are laid out the way that
    # pads less (a [2, 16, 8] shard {1,2,0}: 8 rows of 16 columns, s then minor), and
    # the all-reduce-scatter fusion is formed where the scattered one is then the rows,
    # in whole tiles, two tiles in all (b counted), or the minor one in whole columns;
    # each case here as XLA:TPU compiled it (its [b, s, f] all-reduce-scatter fusion, or
    # the all-reduce of the unsliced partial sums).
    mesh = AbstractMesh((8 // devices, devices), ("data", "model"),
                        axis_types=(AxisType.Auto,) * 2)
    b, s, f = shard
    x = jax.ShapeDtypeStruct((b, s * devices if dim == 1 else s, 64 * devices), jnp.float32,
                             sharding=NamedSharding(mesh, P(None, None, "model")))
    w = jax.ShapeDtypeStruct((64 * devices, f * devices if dim == 2 else f), jnp.float32,
                             sharding=NamedSharding(mesh, P("model", None)))
    out = P(None, None, "model") if dim == 2 else P(None, "model", None)
    lowered = jit(lambda x, w: jnp.einsum("bsk,kf->bsf", x, w),
                  out_shardings=NamedSharding(mesh, out)).trace(x, w).lower(
        lowering_platforms=("tpu",))
    assert _totals(lowered.comm_report(platform="tpu")) == {
        kind: (1, b * s * f * devices * 4)}


def test_tpu_reassociates_summed_reduce_scatters_of_dots():
    # XLA:TPU on v5e 2x4: the sum of three dots' partial sums over "model" (4 devices),
    # each [2, 16, 32] scattered into [2, 16, 8] shards, is one all-reduce-scatter
    # fusion of f32[2, 16, 32] (4096 bytes), the sum reassociated before the
    # reduce-scatter is formed (an attention input's gradient through Q, K and V).
    mesh = AbstractMesh((2, 4), ("data", "model"), axis_types=(AxisType.Auto,) * 2)
    x = jax.ShapeDtypeStruct((2, 16, 256), jnp.float32,
                             sharding=NamedSharding(mesh, P(None, None, "model")))
    w = jax.ShapeDtypeStruct((256, 32), jnp.float32, sharding=NamedSharding(mesh, P("model")))

    def summed(x, a, b, c):
        q, k, v = (jnp.einsum("bsk,kf->bsf", x, m) for m in (a, b, c))
        return q + k + v
    lowered = jit(summed, out_shardings=NamedSharding(mesh, P(None, None, "model"))).trace(
        x, w, w, w).lower(lowering_platforms=("tpu",))
    assert _totals(lowered.comm_report(platform="tpu")) == {"reduce-scatter": (1, 4096)}
    assert _totals(lowered.comm_report(platform="cpu")) == {"all-reduce": (3, 3 * 4096)}


def test_tpu_permutes_the_tokens_once_for_the_lookup_and_its_gradient():
    # Every Llama-shaped step compiled for v5e (16x16, 64x4, 128x2, 8x32, 8x8...) runs
    # one collective-permute of the tokens (s32[1,2048,1]): the embedding lookup's
    # gather and its gradient's scatter read the same permuted indices. (The scatter's
    # other permute completes its padded reduce-scatter: 32000 rows over 16 devices are
    # computed as 16 x 2016, 15 x 16 rows passed on, as 7b's bf16[240,256] at 16x16.)
    mesh = AbstractMesh((16, 16), ("data", "model"), axis_types=(AxisType.Auto,) * 2)
    args = plan_speed.abstract_args("unrolled", mesh, 1, d=2048, ffn=256, vocab=32000,
                                    seq=2048, dtype=BF16)
    lowered = jit(plan_speed.make_step("unrolled", 1, 32, mesh), donate_argnums=(0,)).trace(
        *args).lower(lowering_platforms=("tpu",))
    permutes = [e for e in lowered.comm_report(platform="tpu").entries
                if e.kind == "collective-permute" and e.op in ("stablehlo.gather",
                                                               "stablehlo.scatter")]
    assert [(e.op, e.bytes_per_device) for e in permutes] == [
        ("stablehlo.gather", 2048 * 4), ("stablehlo.scatter", 240 * 128 * 2)]


@pytest.mark.parametrize("data, rows, columns, kind", [
    (256, 2048, 2048, "all-reduce"), (256, 2048, 4096, "all-reduce"),
    (256, 2048, 6144, "all-gather"), (256, 4096, 4096, "all-gather"),
    (128, 1024, 512, "all-gather"), (128, 2048, 1024, "all-gather")])
def test_tpu_gathers_a_small_shard_over_all_256_devices_by_an_all_reduce(
        data, rows, columns, kind):
    # XLA:TPU on v5e 16x16, x @ w with w's rows over "data": over all 256 devices a
    # bf16[8, 2048] or [8, 4096] shard is gathered by an all-reduce of dynamic-update-
    # slices into zeros, an [8, 6144] or [16, 4096] one by an all-gather; over 128
    # devices an all-gather of an [8, 512] or [16, 1024] shard. The bytes are the
    # gathered buffer's.
    mesh = AbstractMesh((data, 256 // data), ("data", "model"),
                        axis_types=(AxisType.Auto,) * 2)
    args = (jax.ShapeDtypeStruct((16 * data, rows), BF16,
                                 sharding=NamedSharding(mesh, P("data", None))),
            jax.ShapeDtypeStruct((rows, columns), BF16,
                                 sharding=NamedSharding(mesh, P("data", None))))
    lowered = jit(lambda x, w: x @ w,
                  out_shardings=NamedSharding(mesh, P("data", None))).trace(*args).lower(
        lowering_platforms=("tpu",))
    assert _totals(lowered.comm_report(platform="tpu")) == {kind: (1, rows * columns * 2)}


@pytest.mark.parametrize("data", [8, 16, 32])
def test_tpu_windows_a_loop_gather_its_dot_contracts_over_16_devices(data):
    # XLA:TPU, the 7b step's scanned layers on v5e 16x16 at "data" 32 x "model" 8 and
    # 8 x 32: the backward's gathers (dx = dy @ w.T, w's gathered rows not contracted)
    # are windowed loops, the forward's (x @ w contracts them) all-gathers; at "data"
    # 16 both windowed.
    mesh = AbstractMesh((data, 256 // data), ("data", "model"),
                        axis_types=(AxisType.Auto,) * 2)

    def step(ws, x):
        def loss(ws):
            h = jax.lax.scan(lambda h, w: (jnp.tanh(h @ w), None), x, ws)[0]
            return jnp.sum(h.astype(jnp.float32))
        return jax.grad(loss)(ws)

    args = (jax.ShapeDtypeStruct((3, 1024, 1024), BF16,
                                 sharding=NamedSharding(mesh, P(None, "data", "model"))),
            jax.ShapeDtypeStruct((16 * data, 1024), BF16,
                                 sharding=NamedSharding(mesh, P("data", None))))
    lowered = jit(step, out_shardings=NamedSharding(mesh, P(None, "data", "model"))).trace(
        *args).lower(lowering_platforms=("tpu",))
    gathers = [e for e in lowered.comm_report(platform="tpu").entries
               if e.op == "stablehlo.dot_general" and e.axes == ("data",)
               and e.kind in ("all-gather", "collective-permute") and "operand 1" in e.tensor]
    kinds = sorted(e.kind for e in gathers)
    assert kinds == (["collective-permute"] * 2 if data == 16
                     else ["all-gather", "collective-permute"])


def test_tpu_gathers_a_scanned_layers_weight_by_a_windowed_loop():
    # FSDP weights of scanned layers (XLA:TPU, Llama-shaped steps with lax.scan on
    # v5e 16x16, "data" 16: every gathered weight in the loop body is windowed, 2n + 1
    # collective-permutes of a 1/n chunk of it per trip; unrolled, all-gathers). On
    # 4 devices of v5e 2x4 this program's loop all-gathers (the windowed loops'
    # devices: ``test_tpu_windows_a_loop_gather_its_dot_contracts_over_16_devices``).
    mesh = AbstractMesh((16, 16), ("data", "model"), axis_types=(AxisType.Auto,) * 2)

    def forward(ws, x):
        return jax.lax.scan(lambda h, w: (jnp.tanh(h @ w), None), x, ws)[0]
    args = (jax.ShapeDtypeStruct((3, 1024, 1024), BF16,
                                 sharding=NamedSharding(mesh, P(None, "data", "model"))),
            jax.ShapeDtypeStruct((256, 1024), BF16, sharding=NamedSharding(mesh, P("data"))))
    lowered = jit(forward, out_shardings=NamedSharding(mesh, P("data"))).trace(*args).lower(
        lowering_platforms=("tpu",))
    gathered = 1024 * 64 * 2  # one layer's weight gathered over "data" (16 devices)
    cpu = [(e.kind, e.runs) for e in lowered.comm_report(platform="cpu").entries
           if e.op == "stablehlo.dot_general"]
    tpu = [(e.kind, e.bytes_per_device, e.runs)
           for e in lowered.comm_report(platform="tpu").entries
           if e.op == "stablehlo.dot_general"]
    assert ("all-gather", 3) in cpu
    assert ("collective-permute", (2 * 16 + 1) * gathered // 16, 3) in tpu
    assert all(kind != "all-gather" for kind, _, _ in tpu)


def test_tpu_reassociates_summed_all_reduces_of_dots(mesh):
    # The gradient of an activation read by three projections: three dots
    # contracting over "model", summed; XLA:TPU all-reduces the sum once.
    def step(x, wq, wk, wv):
        return x @ wq + x @ wk + x @ wv
    w = jax.ShapeDtypeStruct((128, 64), BF16)
    lowered = jit(step, in_shardings=(P("data", "model"),) + (P("model", None),) * 3,
                  out_shardings=P("data", None), mesh=mesh).lower(
        jax.ShapeDtypeStruct((32, 128), BF16), w, w, w)
    assert _totals(lowered.comm_report(platform="tpu")) == {"all-reduce": (1, 8 * 64 * 2)}
    # XLA:CPU reduces all three (in f32; its combiner makes them one op).
    cpu = lowered.comm_report(platform="cpu").totals()["all-reduce"].bytes_per_device
    assert cpu == summarize(find_collectives(lowered.compile().as_text()))[
        "all-reduce"].bytes_per_device == 3 * 8 * 64 * 4


@pytest.mark.parametrize("spec", [P("data", None), P("data", P.UNCONSTRAINED)])
def test_tpu_reassociates_through_constraints_that_keep_the_sharding(mesh, spec):
    # The same sum with each dot's result constrained as the dot leaves it (an
    # activation constraint, closed or open): the constraint moves nothing, so
    # XLA:TPU still all-reduces the sum once.
    def step(x, wq, wk, wv):
        q, k, v = (jax.lax.with_sharding_constraint(x @ w, NamedSharding(mesh, spec))
                   for w in (wq, wk, wv))
        return q + k + v
    w = jax.ShapeDtypeStruct((128, 64), BF16)
    lowered = jit(step, in_shardings=(P("data", "model"),) + (P("model", None),) * 3,
                  out_shardings=P("data", None), mesh=mesh).lower(
        jax.ShapeDtypeStruct((32, 128), BF16), w, w, w)
    assert _totals(lowered.comm_report(platform="tpu")) == {"all-reduce": (1, 8 * 64 * 2)}


def test_tpu_reduce_scatters_a_scatter_adds_partial_sums_into_a_sharded_table(mesh):
    # An embedding's gradient: a scatter-add of the rows read into a table sharded
    # ("model", "data"), its partial sums over "model" reduced onto the table's rows
    # (XLA:TPU, Llama-2-7B's step on v5e 16x16: one reduce-scatter of the
    # [vocab, d / 16] buffer where XLA:CPU all-reduces it and slices).
    def step(table, tokens):
        return jax.grad(lambda t: jnp.sum(t[tokens].astype(jnp.float32) ** 2))(table)
    lowered = jit(step, in_shardings=(P("model", "data"), P("data")),
                  out_shardings=P("model", "data"), mesh=mesh).lower(
        jax.ShapeDtypeStruct((256, 512), BF16), jax.ShapeDtypeStruct((8, 128), jnp.int32))
    reduced = lambda platform: [  # noqa: E731
        (e.kind, e.axes, e.bytes_per_device)
        for e in lowered.comm_report(platform=platform).entries
        if e.op == "stablehlo.scatter" and e.kind in ("all-reduce", "reduce-scatter")]
    assert reduced("tpu") == [("reduce-scatter", ("model",), 256 * 128 * 2)]
    assert reduced("cpu") == [("all-reduce", ("model",), 256 * 128 * 4)]


def test_tpu_buffers_are_tiled_as_xla_tpu_lays_them_out():
    # Argument bytes XLA:TPU compiled for one array of each shape (v5e).
    measured = {((), 4): 512, ((3,), 4): 512, ((300,), 4): 2048, ((1000,), 4): 4096,
                ((300,), 2): 1024, ((5, 7), 4): 4096, ((9, 130), 4): 16384,
                ((9, 130), 2): 8192, ((17, 200), 2): 12288, ((64, 512), 2): 65536,
                ((17, 200), 1): 6144, ((4, 512), 2): 4096, ((2, 3, 5), 4): 3072,
                ((512, 64), 2): 65536}
    for (shape, element_bytes), xla in measured.items():
        assert TPU.buffer_bytes(shape, element_bytes) == xla, shape
    assert CPU.buffer_bytes((9, 130), 4) == 9 * 130 * 4


def test_tpu_memory_estimate_pads_arguments_and_outputs(mesh):
    lowered = jit(lambda x: x * 2, in_shardings=P("data"), mesh=mesh).lower(
        jax.ShapeDtypeStruct((8, 10), jnp.float32))
    assert lowered.memory_estimate(platform="cpu").argument_bytes == 2 * 10 * 4
    tpu = lowered.memory_estimate(platform="tpu")
    assert (tpu.argument_bytes, tpu.output_bytes) == (2 * 128 * 4, 2 * 128 * 4)
    two = jit(lambda x: (x, x + 1), in_shardings=P("data"), mesh=mesh).lower(
        jax.ShapeDtypeStruct((8, 10), jnp.float32))
    # Two outputs and XLA's table of pointers to them: 16 bytes on CPU, one tile on TPU.
    assert two.memory_estimate(platform="cpu").output_bytes == 2 * 2 * 10 * 4 + 16
    assert two.memory_estimate(platform="tpu").output_bytes == 2 * 2 * 128 * 4 + 512


def test_all_reduce_in_xla_tpus_reduce_scatter_fusion_counts_as_reduce_scatter():
    hlo = """HloModule m

%all-reduce-scatter (input: f32[512,512]) -> f32[128,512] {
  %input = f32[512,512]{1,0:T(8,128)S(1)} parameter(0)
  %all-reduce.11 = f32[512,512]{1,0:T(8,128)} all-reduce(%input), channel_id=13, replica_groups={{0,4,8,12}}, to_apply=%add
  ROOT %dynamic-slice = f32[128,512]{1,0:T(8,128)} dynamic-slice(%all-reduce.11, %i, %j), dynamic_slice_sizes={128,512}
}

ENTRY %main (p: f32[512,512]) -> f32[128,512] {
  %p = f32[512,512]{1,0} parameter(0)
  %all-reduce = f32[512,512]{1,0} all-reduce(%p), channel_id=1, replica_groups={{0,1}}, to_apply=%add
  ROOT %fusion = f32[128,512]{1,0} fusion(%all-reduce), kind=kCustom, calls=%all-reduce-scatter
}
"""
    totals = summarize(find_collectives(hlo))
    assert (totals["reduce-scatter"].count, totals["reduce-scatter"].bytes_per_device) == (
        1, 512 * 512 * 4)
    assert totals["all-reduce"].count == 1


def test_tpu_fuses_a_softmax_cross_entropys_chain_into_its_reductions():
    # The gradient of a log-softmax cross-entropy: XLA:CPU keeps the zeros
    # take_along_axis's gradient scatters into (exp, read by the reduction and by the
    # backward, is written over by the gradient output, in that output's buffer);
    # XLA:TPU recomputes exp in each consumer and fuses the scatter-add (a select
    # of a one-hot compare) with its zeros, so no logits-sized temporary is left.
    def loss(logits, targets):
        logp = jax.nn.log_softmax(logits, axis=-1)
        return -jnp.mean(jnp.take_along_axis(logp, targets[:, None], axis=-1))

    lowered = jit(jax.grad(loss)).lower(jax.ShapeDtypeStruct((256, 1024), jnp.float32),
                                        jax.ShapeDtypeStruct((256,), jnp.int32))
    logits_bytes = 256 * 1024 * 4
    cpu = lowered.memory_estimate(platform="cpu")
    assert {b.op for b in cpu.largest if b.bytes_per_device == logits_bytes} == {
        "stablehlo.broadcast_in_dim"}
    values = ProgramReports(lowered.module).values()  # as memory_estimate reads it
    with predicting_for(HBM_ONLY):
        tpu = memory._estimate(values, 5, None)
    assert max(b.bytes_per_device for b in tpu.largest) < logits_bytes
    # three row-sized buffers (the reductions' results), each in a slot of XLA:TPU's
    # 16 KiB heap alignment
    assert tpu.temp_bytes == 3 * TPU.heap_alignment < logits_bytes // 16
    # arguments and outputs are laid out alike on both ([256, 1024] tiles exactly)
    assert (tpu.argument_bytes, tpu.output_bytes) == (cpu.argument_bytes, cpu.output_bytes)
    assert TPU.duplicates_shared_producers and not CPU.duplicates_shared_producers
    assert "stablehlo.scatter" in TPU.fusible and "stablehlo.scatter" not in CPU.fusible


def test_tpu_gathers_an_argument_next_to_its_dot_not_first(mesh):
    # x @ v is the step's largest temporary; w's all-gather is needed only by the last
    # dot. XLA:CPU runs the gather first (both buffers live at the first dot), XLA:TPU
    # right before its dot (latency-hiding scheduler), after x @ v is freed.
    def f(w, v, x):
        return ((x @ v) @ v.T) @ w

    lowered = jit(f, in_shardings=(P("data"), None, P("data")), mesh=mesh).lower(
        jax.ShapeDtypeStruct((512, 512), jnp.float32),
        jax.ShapeDtypeStruct((512, 4096), jnp.float32),
        jax.ShapeDtypeStruct((256, 512), jnp.float32))
    first_dot = 256 // 4 * 4096 * 4  # x @ v per device
    gathered = 512 * 512 * 4
    assert lowered.memory_estimate(platform="cpu").temp_bytes >= first_dot + gathered
    values = ProgramReports(lowered.module).values()  # as memory_estimate reads it
    with predicting_for(HBM_ONLY):
        tpu = memory._estimate(values, 5, None).temp_bytes
    assert first_dot <= tpu < first_dot + gathered
    # the gathered weight held in HBM, as the rule alone has it (not on chip)
    with predicting_for(dataclasses.replace(HBM_ONLY, reshards_arguments_first=True,
                                            on_chip_bytes=0)):
        assert memory._estimate(values, 5, None).temp_bytes >= first_dot + gathered
    assert CPU.reshards_arguments_first and not TPU.reshards_arguments_first


def test_tpu_recomputes_attentions_probabilities_from_the_kept_scores():
    # The backward reads softmax's probabilities (a divide, read by dots) and the scores
    # they are computed from (exp is recomputed there): XLA:TPU fuses the divide into each
    # dot rather than keep it, since the scores it reads are live until then anyway.
    def loss(q, k, v):
        return jnp.sum(jax.nn.softmax(q @ k.T, axis=-1) @ v)

    lowered = jit(jax.grad(loss, argnums=(0, 1, 2))).lower(
        *(jax.ShapeDtypeStruct((512, 128), jnp.float32),) * 3)
    probabilities = 512 * 512 * 4

    def kept(estimate):
        return [b.op for b in estimate.largest if b.bytes_per_device == probabilities]

    assert "stablehlo.divide" in kept(lowered.memory_estimate(platform="cpu"))
    values = ProgramReports(lowered.module).values()  # as memory_estimate reads it
    with predicting_for(HBM_ONLY):
        tpu = memory._estimate(values, 5, None)
    assert "stablehlo.divide" not in kept(tpu) and "stablehlo.dot_general" in kept(tpu)
    with predicting_for(dataclasses.replace(HBM_ONLY, recomputes_fused_values=False)):
        keeping = memory._estimate(values, 5, None)
    assert "stablehlo.divide" in kept(keeping)
    assert tpu.temp_bytes <= keeping.temp_bytes
    assert TPU.recomputes_fused_values and not CPU.recomputes_fused_values


def test_tpu_holds_one_all_reduced_buffer_for_a_sum_of_dots_partial_sums(mesh):
    # Three dots contracting over "model" summed (a layer's input gradient through Q,
    # K and V): XLA:TPU adds the partial sums and all-reduces the sum once, so one
    # all-reduced buffer besides the partial sums, where the three all-reduces
    # combined (XLA:CPU) hold three results at once.
    def f(x, w1, w2, w3):
        q, k, v = x @ w1, x @ w2, x @ w3
        return jnp.sum(jnp.tanh(q + k + v), axis=0)

    weight = jax.ShapeDtypeStruct((1024, 1024), jnp.float32)
    lowered = jit(f, in_shardings=(P(None, "model"),) + (P("model", None),) * 3,
                  out_shardings=P(), mesh=mesh).lower(
        jax.ShapeDtypeStruct((512, 1024), jnp.float32), weight, weight, weight)
    assert _totals(lowered.comm_report(platform="tpu"))["all-reduce"][0] == 1
    values = ModuleValues(lowered.module.operation, missing_as_replicated=True)
    result = 512 * 1024 * 4
    with predicting_for(dataclasses.replace(HBM_ONLY, on_chip_bytes=0)):
        summed = memory._estimate(values, 5, None).temp_bytes
    with predicting_for(dataclasses.replace(HBM_ONLY, on_chip_bytes=0,
                                            reassociates_all_reduces=False)):
        combined = memory._estimate(values, 5, None).temp_bytes
    # and the combined all-reduce's table of pointers (a tuple of three)
    assert combined - summed == 2 * result + TPU.table_bytes(3)


def _deep_mlp(mesh, layers):
    def step(params, x):
        def loss(params):
            h = x
            for w1, w2 in params:
                h = h + jax.nn.gelu(h @ w1) @ w2
            return jnp.mean(h.astype(jnp.float32) ** 2)
        grads = jax.grad(loss)(params)
        return jax.tree.map(lambda p, g: p - 0.1 * g, params, grads)
    specs = tuple((P("data", "model"), P("model", "data")) for _ in range(layers))
    params = tuple((jax.ShapeDtypeStruct((128, 256), BF16), jax.ShapeDtypeStruct((256, 128), BF16))
                   for _ in range(layers))
    return jit(step, in_shardings=(specs, P("data")), out_shardings=specs, mesh=mesh).lower(
        params, jax.ShapeDtypeStruct((32, 128), BF16))


@pytest.mark.parametrize("layers, gathers", [(3, 6), (4, 10), (5, 14), (6, 18)])
def test_tpu_gathers_a_weight_again_for_a_backward_dot_far_from_its_forward_one(
        mesh, layers, gathers):
    # XLA:TPU's all-gathers per step of these FSDP x TP steps on v5e 2x4 (a (4, 2)
    # mesh): each weight but the first layer's w1 is read by a forward and a
    # backward dot, each gathering it (32768 bytes); the backward's gather is the
    # forward's where the two are close (3 layers: all; 6: the last five weights)
    # and made again where not (6 layers: six, the first layer's w2 to the fourth's w1).
    report = _deep_mlp(mesh, layers).comm_report(platform="tpu")
    assert _totals_per_step(report)["all-gather"] == (gathers, gathers * 32768)
    # XLA:CPU has no all-gather CSE: the backward dot, grouped on the weight, gathers
    # it again inside its device groups (its own reshard cache), as compiled there.
    cpu = _deep_mlp(mesh, layers).comm_report(platform="cpu")
    assert _totals_per_step(cpu)["all-gather"][0] == 4 * layers - 1


def _totals_per_step(report):
    return {k: (t.count, t.bytes_per_device) for k, t in report.step_totals().items()
            if t.count}


def test_tpu_gathers_again_for_the_backward_the_weights_read_far_from_it():
    # XLA:TPU gathers a weight for each dot reading it and makes a later gather the
    # first one only where the first's readers are close to it (its schedule-aware
    # all-gather CSE, threshold 100: ``cost.heights``). Llama-3.2-1B's widths, two
    # layers, on v5e 16x16 (``python -m bench.platforms --llama 1b --layers 2``): it
    # keeps the gathered output projection and the last layer's MLP for the backward
    # and gathers the other eleven weights again, 60227584 bytes per device per step
    # (27 all-gathers, one of the token ids); a gather of every weight again would be
    # 99483648, one gather of each 33554432 + 16777216.
    mesh = plan_speed.mesh_of(256)
    args = plan_speed.abstract_args("unrolled", mesh, 2, d=2048, ffn=8192, vocab=128256,
                                    dtype=BF16)
    lowered = jit(plan_speed.make_step("unrolled", 2, 32, mesh), donate_argnums=(0,)).trace(
        *args).lower(lowering_platforms=("tpu",))
    gathers = lowered.comm_report(platform="tpu").step_totals()["all-gather"]
    assert abs(gathers.bytes_per_device / 60227584 - 1) < 0.01
    weights = [e for e in lowered.comm_report(platform="tpu").entries
               if e.kind == "all-gather" and e.op == "stablehlo.dot_general"]
    assert len(weights) == 15 + 11
    # XLA:CPU keeps every gathered weight (its partitioner reshards a value once).
    assert len([e for e in lowered.comm_report(platform="cpu").entries
                if e.kind == "all-gather" and e.op == "stablehlo.dot_general"]) == 15


def test_tpu_all_gathers_a_loop_bodys_weight_two_dots_read():
    # Under jax.checkpoint the backward loop body recomputes the forward: a scanned
    # layer's weight is read by the recomputed dot and the backward one. XLA:TPU
    # windows a loop body's gather only for a dot that is its operand's one reader
    # (the MLP's w2, whose recomputed dot is dead, and every dot of the forward
    # body); the others it all-gathers once for both. Llama-3.2-1B's widths, two
    # scanned checkpointed layers, v5e 16x16 (``python -m bench.platforms --llama 1b
    # --layers 2 --variant remat``): 145584128 bytes of collective-permutes per device
    # per step (windowing every loop-body gather would be 197496832) and 47644672 of
    # all-gathers (two of wq, wk and wv, whose two dots are far apart in the body,
    # gathered twice: the all-gather CSE).
    mesh = plan_speed.mesh_of(256)
    args = plan_speed.abstract_args("remat", mesh, 2, d=2048, ffn=8192, vocab=128256,
                                    dtype=BF16)
    lowered = jit(plan_speed.make_step("remat", 2, 32, mesh), donate_argnums=(0,)).trace(
        *args).lower(lowering_platforms=("tpu",))
    totals = lowered.comm_report(platform="tpu").step_totals()
    assert abs(totals["collective-permute"].bytes_per_device / 145584128 - 1) < 0.01
    assert abs(totals["all-gather"].bytes_per_device / 47644672 - 1) < 0.01



def test_tpu_windows_the_backward_gather_of_a_weight_the_recomputed_forward_all_gathers():
    # The same checkpointed layers over "data" of 32 (v5e 16x16 at 32x8): the recomputed
    # forward's x @ wq contracts the gathered rows, which XLA:TPU does not window over 32
    # devices (``windowed_contracting_devices``), so it all-gathers wq there; the
    # backward's dq @ wq.T does not contract them and windows its own gather (XLA:TPU's
    # backward loop of the 1b step at 32x8: two gathers per weight, one of each kind).
    mesh = AbstractMesh((32, 8), ("data", "model"), axis_types=(AxisType.Auto,) * 2)
    args = plan_speed.abstract_args("remat", mesh, 2, d=2048, ffn=8192, vocab=128256,
                                    dtype=BF16)
    lowered = jit(plan_speed.make_step("remat", 2, 32, mesh), donate_argnums=(0,)).trace(
        *args).lower(lowering_platforms=("tpu",))
    line = next(k for k, text in enumerate(inspect.getsource(plan_speed).splitlines(), 1)
                if 'h @ p["wq"]' in text)  # q, its recomputation and its gradients
    wq = [e for e in lowered.comm_report(platform="tpu").entries
          if e.op == "stablehlo.dot_general" and e.tensor.startswith("operand 1")
          and e.loc is not None and e.loc.line == line]
    windowed = [e for e in wq if "gathered in a loop body" in e.reason]
    # the forward scan's and the recomputed forward's all-gathers, the backward's loop
    assert [e.kind for e in wq if e not in windowed] == ["all-gather", "all-gather"]
    assert len(windowed) == 1 and windowed[0].kind == "collective-permute"


def _vocab_head_grads(data):
    # the output projection of an FSDP x TP train step and its cross-entropy: the
    # logits' gradient (softmax - one_hot, an add) is read by two dots only, the
    # weight's gradient (partial sums over "data") and the input's (w gathered over it)
    mesh = AbstractMesh((data, 256 // data), ("data", "model"), axis_types=(AxisType.Auto,) * 2)

    def loss(w, h, targets):
        logp = jax.nn.log_softmax(h @ w, axis=-1)
        return -jnp.mean(jnp.take_along_axis(logp, targets[:, None], axis=-1))

    args = (jax.ShapeDtypeStruct((512, 16384), BF16, sharding=NamedSharding(mesh, P("data", "model"))),
            jax.ShapeDtypeStruct((256 * data, 512), BF16, sharding=NamedSharding(mesh, P("data"))),
            jax.ShapeDtypeStruct((256 * data,), jnp.int32, sharding=NamedSharding(mesh, P("data"))))
    lowered = jit(jax.grad(loss, argnums=(0, 1))).trace(*args).lower(lowering_platforms=("tpu",))
    logits = 256 * 16384 // (256 // data) * 2  # per device
    return lowered, logits


def _gradient_kept(estimate, logits):
    return [b for b in estimate.largest if b.op == "stablehlo.add" and b.bytes_per_device == logits]


@pytest.mark.parametrize("data, computed_in_dots", [(64, True), (128, True), (16, False), (32, False)])
def test_tpu_computes_the_logits_gradient_inside_its_dots_over_64_devices(data, computed_in_dots):
    # XLA:TPU on v5e 16x16 (Llama-shaped steps): where "data" spans 64 devices or more the
    # logits' gradient is computed from the kept logits inside both dots reading it (the
    # output projection's gradient, ``fusion.8``, and the input's), never a buffer; over
    # 8 to 32 it is a buffer, as it is without the rule.
    lowered, logits = _vocab_head_grads(data)
    values = ProgramReports(lowered.module).values()  # as memory_estimate reads it
    with predicting_for(HBM_ONLY):
        tpu = memory._estimate(values, 5, None)
    assert bool(_gradient_kept(tpu, logits)) is not computed_in_dots
    with predicting_for(dataclasses.replace(HBM_ONLY, dot_operand_fusion_devices=0)):
        kept = memory._estimate(values, 5, None)
    assert _gradient_kept(kept, logits)
    assert TPU.dot_operand_fusion_devices == 64 and not CPU.dot_operand_fusion_devices


@pytest.mark.parametrize("devices, rows, computed", [
    (4, 32064, 32112), (4, 8000, 8016), (4, 8004, 8016), (4, 8032, 8064), (4, 8192, 8208),
    (4, 11200, 11200), (4, 24000, 24080), (4, 4000, 4000), (2, 64128, 64288),
    (2, 16000, 16000), (2, 9616, 9632), (2, 14400, 14400), (8, 16032, 16128),
    (8, 4000, 4000), (8, 6400, 6432), (8, 4816, 4832), (8, 9600, 9600), (16, 2000, 2016),
    (16, 2992, 3024), (16, 8016, 8064), (16, 4800, 4800), (32, 2000, 2016), (32, 960, 960)])
def test_tpu_pads_a_reduce_scatters_shard_to_equal_chunks_of_whole_tiles(devices, rows, computed):
    # XLA:TPU on v5e 16x16, the partial sums of a scatter-add into a [devices x rows,
    # 32] table scattered on its rows over "model" (devices 2 to 32): its all-reduce
    # runs in chunks of at most 304, 228, 158 or 64 tiles of 16 bf16 rows per device
    # (2, 4, 8, 16 and more devices), each device's shard the same whole number of
    # tiles per chunk: 8000 rows over 4 devices (500 tiles, 3 chunks) compute 8016.
    assert TPU.reduce_scatter_rows(rows, devices, 2) == computed
    assert CPU.reduce_scatter_rows(rows, devices, 2) == rows


def test_tpu_permutes_the_rows_a_padded_reduce_scatter_left_on_the_previous_device():
    # Llama-3.2-1B's embedding gradient on v5e 16x16 at "data" 64 x "model" 4: XLA:TPU
    # reduce-scatters the [128256, 32] partial sums padded to 4 x 32112 rows and
    # permutes the last 3 x 48 rows each device computed to the next (bf16[144,32]).
    mesh = AbstractMesh((64, 4), ("data", "model"), axis_types=(AxisType.Auto,) * 2)

    def step(table, tokens):
        return jax.grad(lambda t: jnp.sum(t[tokens].astype(jnp.float32) ** 2))(table)
    lowered = jit(step, in_shardings=(P("model", "data"), P("data")),
                  out_shardings=P("model", "data"), mesh=mesh).trace(
        jax.ShapeDtypeStruct((128256, 2048), BF16),
        jax.ShapeDtypeStruct((64, 2048), jnp.int32)).lower(lowering_platforms=("tpu",))
    scattered = [(e.kind, e.axes, e.bytes_per_device)
                 for e in lowered.comm_report(platform="tpu").entries
                 if e.op == "stablehlo.scatter" and e.kind != "all-gather"]
    assert scattered == [("reduce-scatter", ("model",), 4 * 32112 * 32 * 2),
                         ("collective-permute", ("model",), 144 * 32 * 2)]
    assert [e.kind for e in lowered.comm_report(platform="cpu").entries
            if e.op == "stablehlo.scatter" and e.kind == "collective-permute"] == []


def _small_mesh():
    return AbstractMesh((2, 4), ("data", "model"), axis_types=(AxisType.Auto,) * 2)


def test_tpu_gathers_a_vector_by_an_all_reduce_of_its_shard_in_zeros():
    # XLA:TPU on v5e 2x4 gathers no vector by an all-gather: in the 69 libzoo programs
    # compiled for it every vector gather is an all-reduce of dynamic-update-slices
    # into zeros, combined with the step's other all-reduces (eqx_filter_jit: optax's
    # moment updates of f32[32] biases, shards of 8 over "model" of 4, 28 vectors in
    # one all-reduce of 4096 bytes; linen_lm_clip_adamw: f32[256] over "data" of 4).
    # The bytes are the gathered buffer's, as the all-gather's.
    mesh = _small_mesh()
    vector = jax.ShapeDtypeStruct((32,), jnp.float32,
                                  sharding=NamedSharding(mesh, P("model")))
    lowered = jit(lambda a, b: (a * 2.0, b + 1.0),
                  out_shardings=(NamedSharding(mesh, P()),) * 2).trace(
        vector, vector).lower(lowering_platforms=("tpu",))
    assert _totals(lowered.comm_report(platform="cpu")) == {"all-gather": (2, 2 * 128)}
    assert _totals(lowered.comm_report(platform="tpu")) == {"all-reduce": (1, 2 * 128)}


def test_tpu_gathers_a_variadic_reduces_kept_dimensions_by_an_all_gather():
    # A reduce's partial results keep the reduced dimension (size one), so an argmax's
    # over a vector sharded over "model" is no vector: XLA:TPU all-gathers them
    # (penzai_kv_decode on v5e 2x4: f32[2,1,2] and s32[2,1,2], 96 bytes in all).
    mesh = _small_mesh()
    x = jax.ShapeDtypeStruct((8, 16), jnp.float32,
                             sharding=NamedSharding(mesh, P("data", "model")))
    lowered = jit(lambda x: jnp.argmax(x, axis=-1),
                  out_shardings=NamedSharding(mesh, P("data"))).trace(x).lower(
        lowering_platforms=("tpu",))
    kinds = {e.kind for e in lowered.comm_report(platform="tpu").entries
             if e.op == "stablehlo.reduce"}
    assert kinds == {"all-gather"}


def test_tpu_gathers_an_f32_value_only_dots_read_in_bf16():
    # XLA:TPU converts a DEFAULT-precision dot's f32 operands to bf16 and moves the
    # convert above the layout ops between the value and the dots and above their
    # gather: einops_attention on v5e 2x4 splits its fused QKV projection into heads
    # by a reshape, gathering f32[8, 16, 96] (shard [4, 16, 24]) over "model" for the
    # attention einsums as bf16[4, 16, 96], 12288 bytes (f32: 24576). A value another
    # op reads is gathered in f32 (jax_beam_search: a reshape top_k reads).
    mesh = _small_mesh()
    x = jax.ShapeDtypeStruct((8, 16, 96), jnp.float32,
                             sharding=NamedSharding(mesh, P("data", None, "model")))

    def attention(x):
        q, k, v = jnp.moveaxis(x.reshape(8, 16, 3, 4, 8), 2, 0)
        scores = jnp.einsum("bihd,bjhd->bhij", q, k)
        return jnp.einsum("bhij,bjhd->bihd", scores, v)

    def gathered(platform, fun):
        lowered = jit(fun, out_shardings=NamedSharding(mesh, P("data"))).trace(x).lower(
            lowering_platforms=("tpu",))
        return [e.bytes_per_device for e in lowered.comm_report(platform=platform).entries
                if e.kind == "all-gather" and e.op == "stablehlo.reshape"]

    assert gathered("tpu", attention) == [12288]
    assert gathered("cpu", attention) == [24576]
    assert gathered("tpu", lambda x: jax.lax.top_k(x.reshape(8, 16, 3, 32), 4)[0]) == [24576]


def test_tpu_all_reduces_a_dots_partial_sums_only_dots_read_in_bf16():
    # XLA:TPU moves the bf16 convert of a DEFAULT-precision dot's f32 operand above the
    # all-reduce of the partial sums it reads too: jaxtyping_mlp on v5e 2x4 all-reduces
    # the gradient of ``tokens @ keys`` over "model", which only the keys' gradient dot
    # reads, as bf16[4, 8, 32], 2048 bytes (f32: 4096). Partial sums another op reads
    # (a tanh) are all-reduced in f32.
    mesh = _small_mesh()
    x = jax.ShapeDtypeStruct((16, 32), jnp.float32,
                             sharding=NamedSharding(mesh, P(None, "model")))
    w = jax.ShapeDtypeStruct((32, 32), jnp.float32, sharding=NamedSharding(mesh, P("model")))
    v = jax.ShapeDtypeStruct((32, 8), jnp.float32, sharding=NamedSharding(mesh, P()))

    def reduced(platform, after):
        lowered = jit(lambda x, w, v: after(x @ w) @ v,
                      out_shardings=NamedSharding(mesh, P())).trace(x, w, v).lower(
            lowering_platforms=("tpu",))
        return [e.bytes_per_device for e in lowered.comm_report(platform=platform).entries
                if e.kind == "all-reduce"]

    assert reduced("tpu", lambda h: h) == [16 * 32 * 2]
    assert reduced("cpu", lambda h: h) == [16 * 32 * 4]
    assert reduced("tpu", jnp.tanh) == [16 * 32 * 4]


def test_tpu_all_reduces_a_loops_summed_weight_gradient_once_after_it():
    # XLA:TPU moves an all-reduce whose result a loop body only adds into a carry out
    # of the loop (``WhileLoopAllReduceCodeMotion``): eqx_lstm_lm on v5e 2x4 sums the
    # LSTM cell's weight gradients over the 8 steps of its backward scan and
    # all-reduces them over "data" once after the loop (one combined all-reduce of
    # 15616 bytes; 8 per step predicted before: AR 6.76x XLA:TPU's). XLA:CPU
    # all-reduces them in every trip.
    mesh = _small_mesh()
    xs = jax.ShapeDtypeStruct((8, 16, 32), jnp.float32,
                              sharding=NamedSharding(mesh, P(None, "data")))
    w = jax.ShapeDtypeStruct((32, 32), jnp.float32, sharding=NamedSharding(mesh, P()))

    def grad(w, xs):
        def loss(w):
            return jax.lax.scan(lambda h, x: (jnp.tanh(x @ w + h), None),
                                jnp.zeros((16, 32)), xs)[0].sum()
        return jax.grad(loss)(w)

    lowered = jit(grad, out_shardings=NamedSharding(mesh, P())).trace(w, xs).lower(
        lowering_platforms=("tpu",))

    def weight_gradient(platform):
        return [(e.bytes_per_device, e.runs)
                for e in lowered.comm_report(platform=platform).entries
                if e.kind == "all-reduce" and e.op == "stablehlo.dot_general"]

    assert weight_gradient("cpu") == [(32 * 32 * 4, 8)]
    assert weight_gradient("tpu") == [(32 * 32 * 4, 1)]


def test_tpu_partitions_top_k_along_its_batch_dimensions():
    # XLA:TPU runs ``lax.top_k`` as its TopK custom call, which its SPMD partitioner
    # partitions along the batch dimensions: jax_beam_search on v5e 2x4 takes the top
    # beams of [8, 256] scores sharded over "data" with no collective (its 6 steps'
    # only all-gathers are the 4096-byte reshapes before it); XLA:CPU sorts, gathering
    # the scores whole (8192 bytes a step).
    mesh = _small_mesh()
    scores = jax.ShapeDtypeStruct((8, 256), jnp.float32,
                                  sharding=NamedSharding(mesh, P("data")))
    lowered = jit(lambda s: tuple(jax.lax.top_k(s, 4)),
                  out_shardings=(NamedSharding(mesh, P("data")),) * 2).trace(scores).lower(
        lowering_platforms=("tpu",))
    assert _totals(lowered.comm_report(platform="cpu")) == {"all-gather": (1, 8192)}
    assert _totals(lowered.comm_report(platform="tpu")) == {}
