"""bench/plan_speed.py: planning on an AbstractMesh of 16,384 devices, without devices."""

import math

import jax
import pytest

from bench import plan_speed

# shapes the mesh (data=1024, model=16) divides; their sizes cost nothing to plan
TINY = dict(d=1024, ffn=2048, vocab=2048, seq=16, batch=1024)


def _shard_bytes(leaf):
    return leaf.dtype.itemsize * math.prod(leaf.sharding.shard_shape(leaf.shape))


@pytest.mark.parametrize("variant", plan_speed.VARIANTS)
def test_plan_on_16384_devices(variant):
    row = plan_speed.plan(variant, 16384, 2, heads=4, **TINY)
    assert row["devices"] == 16384 and row["total_s"] > 0
    # the arguments' per-device bytes are what jax's own shard shapes give
    args = plan_speed.abstract_args(variant, plan_speed.mesh_of(16384), 2, **TINY)
    step = plan_speed.jit(plan_speed.make_step(variant, 2, 4, args[1].sharding.mesh))
    lowered = step.trace(*args).lower(lowering_platforms=("cpu",))
    estimate = lowered.memory_estimate()
    assert estimate.argument_bytes == sum(map(_shard_bytes, jax.tree.leaves(args)))
    report = lowered.comm_report()
    runs = {e.runs for e in report.entries}
    assert runs == ({1} if variant == "unrolled" else {1, 2})
    assert row["step_bytes"] >= row["body_once_bytes"] > 0
