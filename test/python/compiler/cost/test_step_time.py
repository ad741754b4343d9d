"""The step-time model: its operations against XLA's cost analysis, its collectives
against the partitioned HLO, and its arithmetic of seconds."""

import jax
import jax.numpy as jnp
import pytest
from jax.sharding import AbstractMesh, AxisType, NamedSharding
from jax.sharding import PartitionSpec as P

from shardc.compiler import jit
from shardc.compiler.cost import StepTime, step_time
from shardc.compiler.cost.platforms import CPU, HARDWARE, TPU, hardware
from shardc.compiler.cost.step_time import collective_seconds

TOLERANCE = 0.05  # the model's operations against XLA's, as docs/step-time-model.md states
AUTO = (AxisType.Auto,) * 2


def _mesh(shape=(4, 2), names=("data", "model")):
    return jax.make_mesh(shape, names, axis_types=(AxisType.Auto,) * len(shape))


def _spec(mesh, shape, spec, dtype=jnp.float32):
    return jax.ShapeDtypeStruct(shape, dtype, sharding=NamedSharding(mesh, spec))


def _compare(lowered):
    """The model's step on cpu and XLA's compiled figures of the same lowering."""
    modelled = lowered.step_time(platform="cpu")
    compiled = lowered.compile()
    return modelled, compiled.cost_analysis()["flops"], compiled


def test_one_sharded_matmul_is_exact():
    mesh = _mesh()
    lowered = jit(lambda a, b: a @ b).lower(_spec(mesh, (256, 512), P("data", "model")),
                                            _spec(mesh, (512, 128), P("model", None)))
    modelled, xla, compiled = _compare(lowered)
    # 2 x (64 x 128) outputs x 256 contracted per device, plus the all-reduce's additions
    assert modelled.flops == xla == 2 * 64 * 128 * 256 + 64 * 128
    reduced = compiled.collectives()["all-reduce"].bytes_per_device
    assert modelled.bytes == reduced == 64 * 128 * 4


def _fsdp_tp_step(w2_spec):
    """An MLP's SGD step: ``w1`` FSDP over data x TP over model, ``w2`` TP (and ``w2_spec``)."""
    mesh = _mesh()
    specs = {"w1": P("data", "model"), "w2": w2_spec}

    def loss(params, x):
        h = jax.nn.relu(x @ params["w1"])
        h = jax.lax.with_sharding_constraint(h, NamedSharding(mesh, P("data", "model")))
        return jnp.mean((h @ params["w2"]) ** 2)

    def step(params, x):
        grads = jax.grad(loss)(params, x)
        return jax.tree.map(lambda w, g: w - 0.1 * g, params, grads)

    params = {"w1": _spec(mesh, (256, 512), specs["w1"]),
              "w2": _spec(mesh, (512, 256), specs["w2"])}
    return jit(step).lower(params, _spec(mesh, (64, 256), P("data", None)))


def _bytes_per_kind_match(lowered, compiled):
    predicted = lowered.comm_report().totals()
    for kind, summary in compiled.collectives().items():
        assert predicted[kind].bytes_per_device == pytest.approx(
            summary.bytes_per_device, rel=TOLERANCE), kind


def test_matmul_chain_fsdp_tp_train_step_matches_xla():
    lowered = _fsdp_tp_step(P("model", None))
    modelled, xla, compiled = _compare(lowered)
    assert abs(modelled.flops_once / xla - 1) <= TOLERANCE
    _bytes_per_kind_match(lowered, compiled)
    assert modelled.bytes == sum(t.bytes_per_device
                                 for t in lowered.comm_report().totals().values())


def test_matmul_chain_with_both_weights_fsdp_matches_xla():
    """A value one dot gathers before grouping its devices and another inside its
    groups is gathered twice (``dot_groups.matching_operand``)."""
    lowered = _fsdp_tp_step(P("model", "data"))
    modelled, xla, compiled = _compare(lowered)
    assert abs(modelled.flops_once / xla - 1) <= TOLERANCE
    _bytes_per_kind_match(lowered, compiled)


_BATCH = P("data", None, None, None)


@pytest.mark.parametrize("stride, padding, x, kernel", [
    (1, "SAME", _BATCH, P(None, None, None, "model")),
    (2, "SAME", _BATCH, P(None, None, None, "model")),
    (1, "VALID", _BATCH, P(None, None, None, "model")),
    # FSDP x TP: the kernel's input channels over the batch's axis, the input's
    # channels over model; XLA computes the kernel's gradient from the device's
    # batch for all input channels, then reduces it
    (1, "SAME", P("data", None, None, "model"), P(None, None, "data", "model"))])
def test_convolution_counts_kernel_positions_inside_the_input(stride, padding, x, kernel):
    mesh = _mesh()

    def f(x, k):
        y = jax.lax.conv_general_dilated(x, k, (stride, stride), padding,
                                         dimension_numbers=("NHWC", "HWIO", "NHWC"))
        return jax.nn.relu(y).sum()

    lowered = jit(jax.grad(f, argnums=(0, 1))).lower(
        _spec(mesh, (8, 16, 16, 8), x), _spec(mesh, (3, 3, 8, 16), kernel))
    modelled, xla, _ = _compare(lowered)
    assert abs(modelled.flops_once / xla - 1) <= TOLERANCE


def test_attention_matches_xla():
    mesh = _mesh()

    def attention(q, k, v):
        scores = jnp.einsum("bqhd,bkhd->bhqk", q, k) / 8.0
        return jnp.einsum("bhqk,bkhd->bqhd", jax.nn.softmax(scores, axis=-1), v)

    qkv = [_spec(mesh, (8, 128, 4, 64), P("data", None, "model", None)) for _ in range(3)]
    modelled, xla, _ = _compare(jit(attention).lower(*qkv))
    assert abs(modelled.flops_once / xla - 1) <= TOLERANCE


def test_loop_bodies_count_once_per_iteration_per_step():
    mesh = _mesh()

    def f(x, ws):
        return jax.lax.scan(lambda c, w: (jnp.tanh(c @ w), None), x, ws)[0]

    x = _spec(mesh, (64, 128), P("data", None))
    ws = _spec(mesh, (6, 128, 128), P(None, None, "model"))
    modelled, xla, _ = _compare(jit(f).lower(x, ws))
    assert modelled.flops_once == pytest.approx(xla, rel=TOLERANCE)  # XLA: the body once
    body = modelled.matmul_flops["f32"] / 6
    assert body == 2 * 16 * 64 * 128  # each iteration's dot, per device
    assert modelled.flops > 5 * modelled.flops_once


def test_step_time_adds_compute_and_communication():
    mesh = AbstractMesh((16, 16), ("data", "model"), axis_types=AUTO)
    lowered = jit(lambda a, b: a @ b).trace(
        _spec(mesh, (4096, 8192), P("data", "model")),
        _spec(mesh, (8192, 4096), P("model", None))).lower(lowering_platforms=("tpu",))
    modelled = lowered.step_time()
    assert isinstance(modelled, StepTime) and modelled.platform == "tpu v5e"
    tpu = HARDWARE["tpu v5e"]
    flops = 2 * 256 * 4096 * 512
    reduced = 256 * 4096  # f32 partial sums of the per-device result
    assert modelled.matmul_flops == {"f32": flops}
    assert modelled.compute_s == pytest.approx(flops / tpu.matmul_rate("f32")
                                               + reduced / tpu.vector_flops)
    (comm,) = modelled.comm
    assert (comm.kind, comm.axes, comm.count) == ("all-reduce", ("model",), 1)
    assert comm.seconds == pytest.approx(
        tpu.latency_s + 2 * 15 / 16 * comm.bytes_per_device / tpu.link_bandwidth)
    assert modelled.total_s == pytest.approx(modelled.compute_s + modelled.comm_s)
    assert modelled.overlapped_s == max(modelled.compute_s, modelled.comm_s)
    assert modelled.comm_by_axes() == {"model": comm.seconds}
    assert "all-reduce" in modelled.format_text()
    assert lowered.step_time(platform="gpu").platform == "gpu h100"


def test_axes_past_a_fast_group_run_over_the_network():
    gpu = hardware("gpu")
    sizes = {"data": 128, "model": 8}  # model: the 8 GPUs of a node
    within = collective_seconds("all-gather", 1 << 20, ("model",), sizes, gpu)
    across = collective_seconds("all-gather", 1 << 20, ("data",), sizes, gpu)
    assert within == pytest.approx(gpu.latency_s + 7 / 8 * (1 << 20) / gpu.link_bandwidth)
    assert across == pytest.approx(gpu.latency_s + 127 / 128 * (1 << 20) / gpu.slow_bandwidth)
    assert collective_seconds("all-reduce", 1 << 20, ("model",), {"model": 1}, gpu) \
        == gpu.latency_s


def test_hardware_names_and_their_rules():
    assert hardware("cpu").rules is CPU and hardware("TPU").rules is TPU
    assert hardware("cuda") is hardware("gpu h100")
    with pytest.raises(ValueError, match="step time for"):
        hardware("ipu")


def test_a_module_given_as_it_is_is_modelled_for_cpu():
    mesh = _mesh()
    lowered = jit(lambda a: jnp.sin(a) * 2.0).lower(_spec(mesh, (64, 64), P("data", "model")))
    modelled = step_time(lowered.module)
    assert modelled.platform == "cpu" and modelled.flops == 16 * 32  # the multiply per device
    assert modelled.flops == lowered.compile().cost_analysis()["flops"]  # sin: transcendental
    assert modelled.comm == ()


def test_a_depthwise_convolutions_kernel_gradient_counts_as_xla_cpu_computes_it():
    # Its batch-grouped convolution runs dense on XLA:CPU (every group against every
    # other, the diagonal blocks kept): 64 groups, 64x the grouped count.
    numbers = ("NHWC", "HWIO", "NHWC")

    def loss(x, w):
        return jax.lax.conv_general_dilated(x, w, (1, 1), "SAME", dimension_numbers=numbers,
                                            feature_group_count=64).sum()

    x = jax.ShapeDtypeStruct((2, 8, 8, 64), jnp.float32)
    w = jax.ShapeDtypeStruct((7, 7, 1, 64), jnp.float32)
    lowered = jit(jax.grad(loss, 1)).trace(x, w).lower()
    xla = lowered.compile().cost_analysis()["flops"]
    cpu, tpu = lowered.step_time(platform="cpu"), lowered.step_time(platform="tpu")
    assert cpu.flops_once == pytest.approx(xla, rel=0.05)
    assert tpu.flops_once == pytest.approx(cpu.flops_once / 64, rel=0.05)


def test_a_depthwise_kernel_gradient_split_by_channel_counts_the_devices_groups():
    # Channels over `model` (4): each device computes its 16 groups dense, not 64.
    mesh = jax.make_mesh((2, 4), ("data", "model"), axis_types=(AxisType.Auto,) * 2)
    numbers = ("NHWC", "HWIO", "NHWC")

    def loss(x, w):
        return jax.lax.conv_general_dilated(x, w, (1, 1), "SAME", dimension_numbers=numbers,
                                            feature_group_count=64).sum()

    x = _spec(mesh, (4, 8, 8, 64), P("data", None, None, "model"))
    w = _spec(mesh, (7, 7, 1, 64), P(None, None, None, "model"))
    lowered = jit(jax.grad(loss, 1)).trace(x, w).lower()
    xla = lowered.compile().cost_analysis()["flops"]
    assert lowered.step_time(platform="cpu").flops_once == pytest.approx(xla, rel=0.05)
