"""A ``jax.experimental.custom_partitioning`` op's collectives, predicted by asking its
partition callback as XLA's partitioner does: the operands resharded to what the
rule takes, the body's own collectives, the result resharded to the op's sharding.
Each held to what XLA compiles on 8 CPU devices."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.experimental.custom_partitioning import custom_partitioning
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P

from shardc.compiler import jit


def mesh():
    return jax.make_mesh((4, 2), ("data", "model"), axis_types=(AxisType.Auto,) * 2)


def _leading(sharding, shape):
    """The operand's sharding on every axis but the last, which is gathered."""
    spec = (list(sharding.spec) + [None] * len(shape.shape))[:len(shape.shape) - 1]
    return NamedSharding(sharding.mesh, P(*spec, None))


@custom_partitioning
def row_fft(x):
    return jnp.fft.fft(x)


row_fft.def_partition(
    infer_sharding_from_operands=lambda mesh, args, result: _leading(args[0].sharding, args[0]),
    partition=lambda mesh, args, result: (
        mesh, jnp.fft.fft, _leading(args[0].sharding, args[0]),
        (_leading(args[0].sharding, args[0]),)),
    sharding_rule="... i -> ... i")


@functools.partial(custom_partitioning, static_argnums=(1,))
def column_sum(x, axis):
    return jnp.sum(x, axis=axis)


def _sum_partition(axis, mesh, args, result):
    spec = (list(args[0].sharding.spec) + [None] * args[0].ndim)[:args[0].ndim]
    reduced, kept = spec[axis], spec[:axis] + spec[axis + 1:]

    def body(x):
        partial = jnp.sum(x, axis=axis)
        return jax.lax.psum(partial, reduced) if reduced is not None else partial

    # the body returns the sum replicated: the op's sharding is a slice of it
    return mesh, body, NamedSharding(mesh, P(*kept)), (NamedSharding(mesh, P(*spec)),)


column_sum.def_partition(
    infer_sharding_from_operands=lambda axis, mesh, args, result: NamedSharding(mesh, P()),
    partition=_sum_partition, sharding_rule="i j -> j")


def predicted_and_compiled(fun, args, specs):
    grid = mesh()
    shardings = tuple(NamedSharding(grid, spec) for spec in specs)
    placed = tuple(jax.device_put(a, s) for a, s in zip(args, shardings))
    lowered = jit(fun, in_shardings=shardings).lower(*placed)
    predicted = {k: t.bytes_per_device for k, t in lowered.comm_report().totals().items()
                 if t.count}
    compiled = lowered.compile()
    collectives = {k: c.bytes_per_device for k, c in compiled.collectives().items() if c.count}
    np.testing.assert_allclose(np.asarray(compiled(*placed), np.complex64),
                               np.asarray(jax.jit(fun)(*placed), np.complex64), rtol=1e-5)
    return predicted, collectives


@pytest.mark.parametrize("spec", [P("data", "model"), P("model", "data"), P(None, "data")])
def test_operands_are_resharded_to_what_the_partition_rule_takes(spec):
    """The rule gathers the FFT axis: XLA all-gathers the operand there first."""
    signals = (np.arange(8 * 16) % 7 + 1j * (np.arange(8 * 16) % 5)).reshape(8, 16)
    predicted, compiled = predicted_and_compiled(
        lambda x: row_fft(x) * 2, (signals.astype(np.complex64),), (spec,))
    assert predicted == compiled
    assert "all-gather" in compiled


@pytest.mark.parametrize("dtype", [np.float32, jnp.bfloat16])
def test_the_bodys_collectives_are_the_ops(dtype):
    """The body's ``psum`` over the summed axis is the op's all-reduce (bf16 reduced in
    f32 on CPU), and the replicated result it returns is sliced to the op's sharding."""
    x = (np.arange(16 * 8) % 9).reshape(16, 8).astype(dtype)
    predicted, compiled = predicted_and_compiled(
        lambda x: column_sum(x, 0), (x,), (P("data", "model"),))
    assert predicted == compiled
    assert set(compiled) == {"all-reduce"}
