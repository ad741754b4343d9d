"""``explain.on_chip``: the temporaries XLA:TPU keeps in VMEM instead of HBM."""

import dataclasses

import jax
import jax.numpy as jnp

from shardc.compiler import jit
from shardc.compiler.cost.platforms import CPU, TPU, predicting_for
from shardc.compiler.explain import memory
from shardc.compiler.explain.liveness import Interval
from shardc.compiler.explain.on_chip import live_peak, on_chip, split_peak
from shardc.compiler.propagation.values import ModuleValues

MIB = 1 << 20


def test_a_loop_body_keeps_buffers_on_chip_shortest_first_while_they_fit():
    long = Interval(0, 9, 60 * MIB, None)
    short = Interval(2, 3, 60 * MIB, None)
    small = Interval(4, 9, 30 * MIB, None)
    held = Interval(5, 5, 8 * MIB, None, fits_output=False)  # an op's own, stays
    placed = on_chip([long, short, small, held], 100 * MIB, 10, body=True)
    # short first, then small (no overlap with short); long no longer fits beside them
    assert placed == [short, small]
    assert split_peak([long, short, small, held], 100 * MIB, 10) == (68 * MIB, 60 * MIB)


def test_the_programs_block_keeps_gathered_and_next_read_buffers_on_chip():
    kept = Interval(0, 9, 8 * MIB, None)  # saved for the backward: evicted to HBM
    gathered = Interval(2, 6, 32 * MIB, None, moved=True)  # an async all-gather's result
    passed = Interval(4, 5, 8 * MIB, None)  # read by the op right after its writer
    placed = on_chip([kept, gathered, passed], 112 * MIB, 10, body=False)
    assert placed == [gathered, passed]
    assert on_chip([kept], 112 * MIB, 10, body=True) == [kept]


def test_a_nested_loops_on_chip_bytes_take_room_from_the_block_around_it():
    loop = Interval(3, 3, 50 * MIB, None, fits_output=False, on_chip=100 * MIB)
    gathered = Interval(0, 5, 20 * MIB, None, moved=True)
    assert on_chip([loop, gathered], 112 * MIB, 6, body=False) == []
    assert on_chip([loop, gathered], 128 * MIB, 6, body=False) == [gathered]
    assert on_chip([gathered], 0, 6, body=True) == []  # no on-chip memory: all in HBM
    assert live_peak([loop, gathered], 6) == (70 * MIB, 3)


def _scan_program():
    def f(x, ws):
        def layer(x, w):
            h = jnp.tanh(x @ w)
            return jnp.tanh(h @ w.T) + x, None
        return jax.lax.scan(layer, x, ws)[0]

    return jit(f).lower(jax.ShapeDtypeStruct((1024, 1024), jnp.float32),
                        jax.ShapeDtypeStruct((4, 1024, 1024), jnp.float32))


def test_tpu_estimate_keeps_a_scanned_layers_buffers_on_chip():
    values = ModuleValues(_scan_program().module.operation, missing_as_replicated=True)
    with predicting_for(TPU):
        tpu = memory._estimate(values, 5, None).temp_bytes
    with predicting_for(dataclasses.replace(TPU, on_chip_bytes=0)):
        hbm = memory._estimate(values, 5, None).temp_bytes
    # the body's [1024, 1024] f32 products (4 MiB each) fit in VMEM; without on-chip
    # memory they are HBM temporaries while the loop runs
    assert hbm >= 4 * MIB and tpu < hbm
    assert CPU.on_chip_bytes == 0 and TPU.on_chip_bytes == 112 * MIB
