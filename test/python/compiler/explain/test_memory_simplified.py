"""What XLA's simplifiers remove before buffers are assigned, as the memory estimate
models it (``simplified``), against XLA's ``memory_analysis()``."""

import jax
import jax.numpy as jnp

import shardc.compiler as sc
from shardc.compiler.explain.simplified import sunk
from shardc.compiler.propagation.values import ModuleValues


def _scanned_zeros(g):
    # an L-BFGS first step: a scan reading an all-zero history it closes over
    history = jnp.zeros((10, 64, 32))

    def body(r, i):
        return r - jnp.vdot(history[i], r) * history[i] + 1.0, None
    return jax.lax.scan(body, g, jnp.arange(10))[0]


def _net(fun, *args):
    lowered = sc.jit(fun).lower(*args)
    estimate = lowered.memory_estimate()
    stats = jax.jit(fun).lower(*args).compile().memory_analysis()
    return estimate.compare(stats)["net"], (estimate.temp_bytes, stats.temp_size_in_bytes)


def test_a_zero_broadcast_a_loop_reads_is_computed_in_its_body():
    # XLA's body computes the zeros (its slices of them fold to a broadcast): no
    # 80 KiB history outside the loop (the estimate held it: 4.3x XLA's net bytes)
    ratio, temps = _net(_scanned_zeros, jnp.ones((64, 32)))
    assert abs(ratio - 1) <= 0.05, temps


def test_the_sunk_broadcast_leaves_the_loop_and_its_carry():
    lowered = sc.jit(_scanned_zeros).lower(jnp.ones((64, 32)))
    graph = ModuleValues(lowered.module.operation, missing_as_replicated=True).graph
    view = sunk(graph)
    broadcasts = [op for op, name in enumerate(graph.op_name)
                  if name == "stablehlo.broadcast_in_dim" and graph.op_parent[op] >= 0
                  and graph.op_name[graph.op_parent[op]] == "func.func"
                  and graph.value_shape[graph.op_results[op][0]] == (10, 64, 32)]
    assert len(broadcasts) == 1
    history = graph.op_results[broadcasts[0]][0]
    assert any(graph.op_name[user] == "stablehlo.while" for user, _ in graph.uses[history])
    assert view.uses[history] == []
    assert all(broadcasts[0] not in ops for blocks in view.op_blocks for _, ops in blocks)


def test_a_constant_carried_unchanged_is_the_broadcast_its_later_readers_read():
    # the loop's unchanged carry is gone: the update after the loop writes the
    # broadcast straight into its output (the estimate held a 64 KiB carry: 1.99x)
    def fun(g, v):
        twos = jnp.full((256, 64), 2.0)

        def body(carry, i):
            r, z = carry
            return (r + z[i] * v, z), None
        (r, z), _ = jax.lax.scan(body, (g, twos), jnp.arange(8))
        return r, z.at[3].set(r)
    ratio, temps = _net(fun, jnp.ones((64,)), jnp.ones((64,)))
    assert abs(ratio - 1) <= 0.05, temps
