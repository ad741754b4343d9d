"""Lowered.memory_estimate() against XLA:CPU's Compiled.memory_analysis(), one program
per effect of XLA's buffer assignment the model reproduces, none of them a program the
rules were read off: each must land within 10% of XLA's net bytes (arguments + outputs
+ temporaries - aliased), and its temporaries within 25%."""

import jax
import jax.numpy as jnp
import pytest
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P

import shardc.compiler as sc
from shardc.compiler.explain.heap import heap_bytes


def _mesh():
    return jax.make_mesh((4, 2), ("data", "model"), axis_types=(AxisType.Explicit,) * 2)


def _compare(fun, args, in_shardings, donate=()):
    lowered = sc.jit(fun, in_shardings=in_shardings, donate_argnums=donate).lower(*args)
    estimate = lowered.memory_estimate()
    stats = lowered.compile().memory_analysis()
    xla_net = (stats.argument_size_in_bytes + stats.output_size_in_bytes
               + stats.temp_size_in_bytes - stats.alias_size_in_bytes)
    assert estimate.argument_bytes == stats.argument_size_in_bytes
    assert estimate.output_bytes == stats.output_size_in_bytes
    return estimate, stats, xla_net


def _assert_close(estimate, stats, xla_net):
    figures = (estimate.net_bytes, xla_net, estimate.temp_bytes, stats.temp_size_in_bytes)
    assert abs(estimate.net_bytes / xla_net - 1) <= 0.10, figures
    assert abs(estimate.temp_bytes / stats.temp_size_in_bytes - 1) <= 0.25, figures


def test_many_small_buffers_take_the_heap_alignment():
    # Tiny dot results all live until the end: a few floats each, and XLA:CPU's heap
    # gives each a 64-byte aligned slot (counted at 24 bytes, the estimate was 40%).
    def f(a, ys):
        parts = [jnp.tanh(a @ y) for y in ys]
        return sum(p * k for k, p in enumerate(parts)), jnp.stack(parts[::-1])

    mesh = _mesh()
    ys = [jnp.full((6,), float(k)) for k in range(12)]
    shardings = (NamedSharding(mesh, P()), [NamedSharding(mesh, P())] * len(ys))
    _assert_close(*_compare(f, (jnp.eye(6), ys), shardings))


def test_heap_packs_like_xla_best_fit():
    # Three 64-byte buffers live one after another share one slot; a long-lived one
    # beside them takes a second: the heap is two slots, not the sum.
    assert heap_bytes([(0, 9, 64), (0, 2, 64), (3, 5, 64), (6, 9, 64)], 64) == 128
    # Sizes round up to the alignment; nothing live, no heap.
    assert heap_bytes([(0, 0, 4), (1, 1, 4)], 64) == 64
    assert heap_bytes([], 64) == 0


@pytest.mark.parametrize("square", [jnp.square, lambda x: x * x], ids=["chlo", "multiply"])
def test_square_fuses_like_a_multiply(square):
    # jnp.square lowers to chlo.square: elementwise, fused into its readers like x * x.
    def f(x):
        return jnp.sum(square(jnp.sin(x)), axis=0) + jnp.max(square(jnp.cos(x)), axis=0)

    x = jnp.ones((256, 256))
    estimate = sc.jit(f).lower(x).memory_estimate()
    stats = jax.jit(f).lower(x).compile().memory_analysis()
    assert estimate.temp_bytes <= stats.temp_size_in_bytes + 64 * 4
