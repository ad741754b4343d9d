"""What ``explain.needs`` records per op under each platform's rules: the buffers of
a reduce-scattered dot's result and the second-layout copies of dot operands."""

import dataclasses

import jax
import jax.numpy as jnp
import pytest
from jax.sharding import AxisType
from jax.sharding import PartitionSpec as P

from shardc.compiler import jit
from shardc.compiler.cost.platforms import CPU, TPU, predicting_for
from shardc.compiler.explain import memory
from shardc.compiler.explain.needs import OpNeeds
from shardc.compiler.propagation.values import ModuleValues


@pytest.fixture(scope="module")
def mesh():
    return jax.make_mesh((4, 2), ("data", "model"), axis_types=(AxisType.Auto,) * 2)


def _values(lowered) -> ModuleValues:
    return ModuleValues(lowered.module.operation, missing_as_replicated=True)


def _dots(values: ModuleValues) -> list[int]:
    graph = values.graph
    return [op for op in range(len(graph.ops)) if graph.op_name[op] == "stablehlo.dot_general"]


def _weight_gradient(mesh, batch: int):
    # x^T @ dy contracts the batch, sharded over "data"; the result is sharded over
    # "data" too: partial sums reduce-scattered (XLA:TPU), all-reduced and sliced (CPU)
    def grad(x, dy):
        return x.T @ dy

    return jit(grad, in_shardings=(P("data"), P("data")), out_shardings=P("data"),
               mesh=mesh).lower(jax.ShapeDtypeStruct((batch, 512), jnp.float32),
                                jax.ShapeDtypeStruct((batch, 1024), jnp.float32))


@pytest.mark.parametrize("batch, windowed", [(1024, False), (8192, True)])
def test_tpu_reduce_scatter_writes_the_shard(mesh, batch, windowed):
    values = _values(_weight_gradient(mesh, batch))
    (dot,) = _dots(values)
    (result,) = values.graph.op_results[dot]
    partial = 512 * 1024 * 4  # the [512, 1024] partial sums per device
    with predicting_for(CPU):
        cpu = OpNeeds.collect(values)
    # XLA:CPU all-reduces the whole partial sums and slices them in the readers
    assert cpu.partial[result] == partial and result not in cpu.scattered
    with predicting_for(TPU):
        tpu = OpNeeds.collect(values)
        staged = memory._estimate(values, 5, None)
    # where not all arrays fit on chip, HBM holds what the partial sums need
    with predicting_for(dataclasses.replace(TPU, stages_in_vmem=False)):
        estimate = memory._estimate(values, 5, None)
    # XLA:TPU writes the [128, 1024] shard: the partial sums live only while the dot
    # runs, and not at all where a windowed loop computes the shard chunk by chunk
    # (a contraction longer than windowed_reduce_scatter_above)
    assert result in tpu.scattered and result not in tpu.partial
    assert (batch > TPU.windowed_reduce_scatter_above) == windowed
    assert tpu.extra.get(dot, 0) == (0 if windowed else partial)
    assert estimate.temp_bytes == (0 if windowed else partial)
    # so small a program XLA:TPU stages whole through VMEM (the 2 MiB partial sums
    # there, 3 MiB of VMEM at batch 1024): its HBM temporaries are the same 2048 bytes
    # at both batches, a prefetch's table and the reduce-scatter's three scalars; the
    # estimate prefetches both arguments (one table more, 16 KiB apart)
    assert staged.temp_bytes == 16384 + 512 + 3 * 512


def _normed_input(mesh):
    # h is read by h @ w (its last dimension contracted) and by the weight gradient
    # h^T @ dy over batch and sequence (a dimension before its two minor ones)
    def f(x, w, dy):
        h = jnp.sin(x)
        return h @ w, jnp.einsum("bsd,bsf->df", h, dy)

    return jit(f, mesh=mesh).lower(jax.ShapeDtypeStruct((2, 256, 512), jnp.float32),
                                   jax.ShapeDtypeStruct((512, 256), jnp.float32),
                                   jax.ShapeDtypeStruct((2, 256, 256), jnp.float32))


def test_tpu_copies_an_operand_dots_read_in_two_layouts(mesh):
    values = _values(_normed_input(mesh))
    forward, gradient = _dots(values)
    h = values.graph.op_operands[forward][0]
    with predicting_for(TPU):
        tpu = OpNeeds.collect(values)
    copy = ((h, ("transposed", "contracted minor")), 2 * 256 * 512 * 4, 0)
    assert copy in tpu.needs.get(gradient, [])
    assert tpu.relaid == {(h, gradient)}  # the gradient reads the copy, not h
    assert all(key[0] != h for key, _, _ in tpu.needs.get(forward, []))
    with predicting_for(CPU):
        assert all(key[0] != h for key, _, _ in OpNeeds.collect(values).needs.get(gradient, []))
    with predicting_for(dataclasses.replace(TPU, copies_operands_per_layout=False)):
        assert all(key[0] != h for key, _, _ in OpNeeds.collect(values).needs.get(gradient, []))


def test_tpu_reads_either_minor_dimension_without_a_copy(mesh):
    # attention's probabilities: p @ v contracts k (the last), p^T @ dout contracts q
    # (second minor): the matrix unit reads both from one layout
    def f(p, v, dout):
        return jnp.einsum("bqk,bkd->bqd", p, v), jnp.einsum("bqk,bqd->bkd", p, dout)

    lowered = jit(f, mesh=mesh).lower(*(jax.ShapeDtypeStruct(s, jnp.float32) for s in (
        (2, 256, 256), (2, 256, 128), (2, 256, 128))))
    values = _values(lowered)
    p = values.graph.op_operands[_dots(values)[0]][0]
    with predicting_for(TPU):
        tpu = OpNeeds.collect(values)
    assert all(key[0] != p for entries in tpu.needs.values() for key, _, _ in entries)
