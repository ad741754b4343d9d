"""A spectral layer whose FFT is a ``jax.experimental.custom_partitioning`` op, as jax's docs write it.

The FFT is the docs' example: ``my_fft`` computes ``jnp.fft.fft`` over the last
axis, and its partition rule keeps every leading axis as the operand is sharded
while gathering the FFT axis (``infer_sharding_from_operands`` and
``partition`` agree on that sharding; ``sharding_rule`` gives Shardy the
einsum-like ``...i -> ...i``). A second op, ``scaled_sum`` (a
``static_argnums`` custom partitioning), sums over a sharded axis and completes
the sum with a ``psum`` in its partitioned body. The step filters a batch of
complex signals, sharded over ``data`` and ``model``, in the frequency domain
with a filter replicated on every device and returns the filtered spectrum and
each signal's scaled energy.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax.experimental.custom_partitioning import custom_partitioning
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from bench.models.program import Program, RandomArrays, check_size, make_mesh

NAME = "jax_custom_partitioning_fft"
SIZES = {
    "small": dict(batch=8, length=16),
    "large": dict(batch=256, length=4096),
}


def supported_sharding(sharding, shape):
    """The operand's sharding on every axis but the last (the FFT's), replicated there."""
    rank = len(shape.shape)
    max_shared_dims = min(len(sharding.spec), rank - 1)
    names = tuple(sharding.spec[:max_shared_dims]) + (None,) * (rank - max_shared_dims)
    return NamedSharding(sharding.mesh, P(*names))


@custom_partitioning
def my_fft(x):
    return jnp.fft.fft(x)


def _fft_partition(mesh, arg_shapes, result_shape):
    arg_shardings = jax.tree.map(lambda s: s.sharding, arg_shapes)
    sharding = supported_sharding(arg_shardings[0], arg_shapes[0])
    return mesh, jnp.fft.fft, sharding, (sharding,)


def _fft_infer(mesh, arg_shapes, result_shape):
    arg_shardings = jax.tree.map(lambda s: s.sharding, arg_shapes)
    return supported_sharding(arg_shardings[0], arg_shapes[0])


my_fft.def_partition(infer_sharding_from_operands=_fft_infer, partition=_fft_partition,
                     sharding_rule="...i -> ...i")  # fmt: skip


@functools.partial(custom_partitioning, static_argnums=(1,))
def scaled_sum(x, axis):
    return jnp.sum(x, axis=axis) * 2.0


def _spec(shape) -> list:
    return (list(shape.sharding.spec) + [None] * shape.ndim)[:shape.ndim]


def _sum_infer(axis, mesh, arg_shapes, result_shape):
    spec = _spec(arg_shapes[0])
    del spec[axis]
    return NamedSharding(mesh, P(*spec))


def _sum_partition(axis, mesh, arg_shapes, result_shape):
    in_spec = _spec(arg_shapes[0])
    reduced = in_spec[axis]
    out_spec = in_spec[:axis] + in_spec[axis + 1:]

    def lower(x):
        partial = jnp.sum(x, axis=axis) * 2.0
        return jax.lax.psum(partial, reduced) if reduced is not None else partial

    return mesh, lower, NamedSharding(mesh, P(*out_spec)), (NamedSharding(mesh, P(*in_spec)),)


scaled_sum.def_partition(infer_sharding_from_operands=_sum_infer, partition=_sum_partition,
                         sharding_rule="i j -> i")  # fmt: skip


def spectral_step(signals, spectral_filter):
    spectrum = my_fft(signals) * spectral_filter
    energy = scaled_sum(jnp.abs(spectrum) ** 2, 1)
    return spectrum, energy


def make(size: str = "small") -> Program:
    check_size(size)
    dims = SIZES[size]
    mesh = make_mesh((4, 2), ("data", "model"))
    rand = RandomArrays(seed=61)
    shape = (dims["batch"], dims["length"])
    signals = (rand.normal(shape) + 1j * rand.normal(shape)).astype(jnp.complex64)
    spectral_filter = jnp.exp(-jnp.linspace(0.0, 4.0, dims["length"])).astype(jnp.complex64)
    signal_sharding = NamedSharding(mesh, P("data", "model"))
    replicated = NamedSharding(mesh, P())
    return Program(
        name=NAME,
        description="custom_partitioning FFT (jax docs' rule, sharding_rule for Shardy) and a "
        "static_argnums custom_partitioning sum with a psum, complex signals over data x model",
        fun=spectral_step,
        args=(jax.device_put(signals, signal_sharding),
              jax.device_put(spectral_filter, replicated)),
        in_shardings=(signal_sharding, replicated),
        out_shardings=None,
        mesh=mesh,
    )
