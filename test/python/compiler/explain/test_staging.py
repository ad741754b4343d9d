"""``explain.staging``: what XLA:TPU leaves in HBM when it stages a small program's
arrays through VMEM (``PlatformRules.stages_in_vmem``), and that XLA:CPU's estimate
has none of it."""

import dataclasses

import jax
import jax.numpy as jnp
import pytest
from jax.sharding import AxisType

from shardc.compiler import jit
from shardc.compiler.cost.platforms import CPU, TPU, predicting_for
from shardc.compiler.explain import memory
from shardc.compiler.explain.liveness import LivenessWalker
from shardc.compiler.explain.staging import per_element_bytes, staged_tables
from shardc.compiler.propagation.values import ModuleValues

HBM_ONLY = dataclasses.replace(TPU, stages_in_vmem=False)


@pytest.fixture(scope="module")
def mesh():
    return jax.make_mesh((4, 2), ("data", "model"), axis_types=(AxisType.Auto,) * 2)


def _values(fun, mesh, *shapes) -> ModuleValues:
    lowered = jit(fun, mesh=mesh).lower(
        *(jax.ShapeDtypeStruct(s, d) for s, d in shapes))
    return ModuleValues(lowered.module.operation, missing_as_replicated=True)


def _walked(values):
    walker = LivenessWalker(values)
    graph = walker.graph
    func = memory._main(values)
    args, ops = graph.op_blocks[func][0]
    walker.peak(ops, set(graph.op_operands[ops[-1]]), [])
    return walker, args, ops


def _logits_max(x, w, n):
    # the logits are read by their max and by the shifted exp: XLA fuses the max with
    # the dot writing the logits, a multi-output fusion of both
    logits = x @ w
    m = jnp.max(logits, axis=-1, keepdims=True)
    return jnp.sum(jnp.exp(logits - m), axis=-1) * n


def test_tpu_prefetches_each_argument_and_writes_a_reduction_with_its_producer(mesh):
    values = _values(_logits_max, mesh, ((16, 32), jnp.float32), ((32, 64), jnp.float32),
                     ((), jnp.float32))
    with predicting_for(TPU):
        walker, args, ops = _walked(values)
        tables = staged_tables(walker, args, ops)
    graph = walker.graph
    # a copy-start per non-scalar argument (the scalar n is read from HBM), and one
    # fusion writing the logits and their max, each table one 512-byte buffer
    assert {key for key in tables if key[0] == "prefetch"} == {("prefetch", a) for a in args[:2]}
    [fused] = [key[1] for key in tables if key[0] == "fusion"]
    assert graph.op_name[graph.value_def[fused]] == "stablehlo.dot_general"
    assert set(tables.values()) == {512}
    with predicting_for(CPU):
        walker, args, ops = _walked(values)
        assert staged_tables(walker, args, ops) == {}
        assert per_element_bytes(walker, ops) == 0


def test_tpu_keeps_a_reductions_scalars_per_element(mesh):
    values = _values(_logits_max, mesh, ((16, 32), jnp.float32), ((32, 64), jnp.float32),
                     ((), jnp.float32))
    with predicting_for(TPU):
        walker, _, ops = _walked(values)
        # the max's and the sum's regions: two parameters and a result each
        assert per_element_bytes(walker, ops) == 2 * 3 * 512


def _adam(p, mu, nu, g):
    mu = 0.9 * mu + 0.1 * g
    nu = 0.99 * nu + 0.01 * g * g
    return p - 1e-3 * mu / (jnp.sqrt(nu) + 1e-8), mu, nu


def test_tpu_writes_outputs_computed_together_from_one_fusion(mesh):
    # an Adam update's parameter and moments all read the gradient: one sibling fusion
    # of three results (XLA:TPU's multiply_add_fusion = (f32[32,8], f32[32,8], f32[32,8]))
    values = _values(_adam, mesh, *[((32, 8), jnp.float32)] * 4)
    with predicting_for(TPU):
        walker, args, ops = _walked(values)
        tables = staged_tables(walker, args, ops)
    assert [size for key, size in tables.items() if key[0] == "siblings"] == [512]
    # an update per parameter: two fusions
    values = _values(lambda p, q, mu, nu, m, n, g, h: (*_adam(p, mu, nu, g), *_adam(q, m, n, h)),
                     mesh, *[((32, 8), jnp.float32)] * 8)
    with predicting_for(TPU):
        walker, args, ops = _walked(values)
        assert len([key for key in staged_tables(walker, args, ops) if key[0] == "siblings"]) == 2


def test_tpu_estimate_of_a_staged_program_is_its_tables_and_scalars(mesh):
    values = _values(_logits_max, mesh, ((16, 32), jnp.float32), ((32, 64), jnp.float32),
                     ((), jnp.float32))
    with predicting_for(TPU):
        staged = memory._estimate(values, 5, None)
    with predicting_for(HBM_ONLY):
        unstaged = memory._estimate(values, 5, None)
    assert unstaged.temp_bytes > 0
    # every array on chip; three tables 16 KiB apart (two prefetches, one fusion),
    # and the two reductions' six scalars
    assert staged.temp_bytes == 2 * (16 << 10) + 512 + 6 * 512
    assert staged.argument_bytes == unstaged.argument_bytes


def test_tpu_keeps_arrays_in_hbm_where_they_do_not_fit(mesh):
    values = _values(_logits_max, mesh, ((16, 32), jnp.float32), ((32, 64), jnp.float32),
                     ((), jnp.float32))
    with predicting_for(dataclasses.replace(TPU, on_chip_bytes=512)):
        small = memory._estimate(values, 5, None)
    with predicting_for(dataclasses.replace(HBM_ONLY, on_chip_bytes=512)):
        unstaged = memory._estimate(values, 5, None)
    # the tables and scalars come on top of the arrays the unstaged walk keeps
    assert small.temp_bytes > unstaged.temp_bytes
