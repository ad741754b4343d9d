"""AUTO's objective is ``Lowered.step_time``'s model: a state's price is the step time
of the program returned for it."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P

from bench import auto_search as auto_bench
from shardc.compiler import AUTO, jit
from shardc.compiler.auto import modelled_step
from shardc.compiler.auto.candidates import tensor_sharding
from shardc.compiler.auto.evaluate import Evaluator
from shardc.compiler.auto.objective import step_time
from shardc.compiler.cost.flops import module_flops
from shardc.compiler.cost.platforms import hardware, predicting_for


def _attention_like(wq, wk, wv, wo, x):
    """x's gradient is a sum of three dots' partial sums under tensor parallelism (q, k,
    v): XLA:TPU reassociates their all-reduces into one."""
    q, k, v = x @ wq, x @ wk, x @ wv
    return jnp.sum(((q * k) + v) @ wo)


def _qkv_args(d=256, hidden=512, batch=64):
    rng = np.random.default_rng(0)
    w = [rng.normal(size=(d, hidden)).astype(np.float32) / 16 for _ in range(3)]
    return (*w, rng.normal(size=(hidden, d)).astype(np.float32) / 16,
            rng.normal(size=(batch, d)).astype(np.float32))


@pytest.fixture(scope="module")
def mesh():
    return jax.make_mesh((2, 4), ("data", "model"), axis_types=(AxisType.Auto,) * 2)


@pytest.mark.parametrize("platform", ["cpu", "tpu"])
def test_modelled_step_is_lowered_step_time(mesh, platform):
    # Megatron's orientation: q, k, v column-parallel, the output row-parallel.
    step = jax.grad(_attention_like, argnums=(0, 1, 2, 3, 4))
    specs = (P(None, "model"),) * 3 + (P("model", None), P("data"))
    shardings = tuple(NamedSharding(mesh, s) for s in specs)
    traced = jit(step, in_shardings=shardings, mesh=mesh).trace(*_qkv_args())
    modelled = modelled_step(traced.lower(propagate=False).module, platform)
    lowered = traced.lower(lowering_platforms=(platform,))
    timed = lowered.step_time(platform=platform)
    assert modelled.seconds == pytest.approx(timed.total_s, rel=1e-9)
    assert (modelled.comm_bytes, modelled.collectives) == (
        timed.bytes, sum(c.count for c in timed.comm))
    if platform == "tpu":
        # One all-reduce of x's gradient over "model", not three.
        report = lowered.comm_report(platform="tpu")
        assert sum(e.kind == "all-reduce" and e.axes == ("model",) and e.op == "stablehlo.dot_general"
                   for e in report.entries) == 1, report.format_text()


@pytest.mark.parametrize("platform", ["cpu", "tpu"])
def test_auto_price_is_step_time_of_the_program_it_returns(platform):
    abstract = jax.sharding.AbstractMesh((2, 4), ("data", "model"),
                                         axis_types=(AxisType.Auto,) * 2)
    args = jax.tree.map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype),
                        auto_bench.mlp_case(layers=3, d=512, hidden=2048, batch=256).args)
    lowered = jit(auto_bench.mlp_step, in_shardings=AUTO, out_shardings=AUTO,
                  mesh=abstract).trace(*args).lower(lowering_platforms=(platform,))
    report = lowered.auto_report()
    timed = lowered.step_time(platform=platform)
    assert report.step.seconds == pytest.approx(timed.total_s, rel=1e-9), (
        report.format_text(), timed.format_text())
    assert report.step.comm_bytes == timed.bytes


def test_auto_memory_is_memory_estimate_of_the_program_it_returns():
    # The search propagates the program in XLA's op order; its memory model walks
    # the buffers in jax's, as Lowered.memory_estimate does (a train step's
    # backward in HLO's post-order keeps the forward's activations live longer).
    abstract = jax.sharding.AbstractMesh((2, 4), ("data", "model"),
                                         axis_types=(AxisType.Auto,) * 2)
    args = jax.tree.map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype),
                        auto_bench.mlp_case(layers=3, d=512, hidden=2048, batch=256).args)
    lowered = jit(auto_bench.mlp_step, in_shardings=AUTO, out_shardings=AUTO, mesh=abstract,
                  memory_budget=1 << 40).trace(*args).lower(lowering_platforms=("cpu",))
    step = lowered.auto_report().step
    assert step.estimated
    assert step.memory_peak == lowered.memory_estimate(platform="cpu").net_bytes


def test_states_priced_with_the_memo_count_as_a_fresh_read(mesh):
    # The evaluator looks each op's flops and collectives up by its key across states
    # and layers: every state's price is that of counting it afresh.
    args = jax.tree.map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype),
                        auto_bench.mlp_case(layers=4, d=64, hidden=256, batch=32).args)
    module = jit(auto_bench.mlp_step, mesh=mesh).trace(*args).lower(propagate=False).module
    device = hardware("tpu")
    evaluator = Evaluator(module, device)
    sizes = dict(mesh.shape)
    specs = [(("data",), ("model",)), (("model",), ("data",)), ((), ("model",)), ((), ())]
    weights = len(jax.tree.leaves(args[0]))
    for first, second in [(a, b) for a in specs for b in specs]:
        assignment = {k: tensor_sharding(evaluator.mesh, first if k % 2 == 0 else second, sizes)
                      for k in range(weights)}
        priced, reader = evaluator(assignment)  # looked up by op keys where known
        with predicting_for(device.rules):
            memoized = module_flops(reader, evaluator.work["flops"])
            fresh = step_time(reader, device)  # no memo: every op counted
            assert memoized == module_flops(reader)
        assert priced == fresh


@pytest.mark.parametrize("donate", [False, True])
def test_memory_floor_bounds_the_memory_model(mesh, donate):
    # Under a budget the search skips the memory model for states whose arguments and
    # results alone exceed it: that floor never exceeds the model's memory.
    args = jax.tree.map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype),
                        auto_bench.mlp_case(layers=2, d=64, hidden=256, batch=32).args)
    module = jit(auto_bench.mlp_step, mesh=mesh, donate_argnums=(0,) if donate else ()
                 ).trace(*args).lower(propagate=False).module
    evaluator = Evaluator(module, hardware("cpu"))
    sizes = dict(mesh.shape)
    weights = len(jax.tree.leaves(args[0]))
    for spec in [((), ()), (("data",), ("model",)), (("data", "model"), ())]:
        assignment = {k: tensor_sharding(evaluator.mesh, spec, sizes) for k in range(weights)}
        _, reader = evaluator(assignment)
        floor, memory = evaluator.floor(reader), evaluator.memory(reader)
        assert 0 < floor <= memory
        if spec == ((), ()) and not donate:  # replicated weights in and out: most of it
            assert floor >= 0.5 * memory
