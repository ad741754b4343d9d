"""Incremental re-propagation (``Propagation.repropagate``) is a full propagation.

For random programs (the differential generator) and random changes of one
op's starting sharding (and of two, and back to none), re-propagating from a
recorded run must give exactly the store a propagation from scratch with those
starts gives: shardings, interned ids, each op's ``sdy.sharding`` attribute and
what is written back.
"""

from __future__ import annotations

import random

import pytest
from differential.shared_reads import generated_reads, mesh_axes, random_start, startable_ops

from bench import repropagation
from bench.models import REGISTRY, REGRESSIONS
from shardc.dialects import make_context


@pytest.mark.filterwarnings("ignore")
@pytest.mark.parametrize("plan", ["basic-then-aggressive", "user-priority"])
def test_repropagation_equals_propagation_from_scratch(plan):
    context = make_context()
    checked = replayed = 0
    for seed, text, _, read in generated_reads(context):
        if not read.usable:
            continue
        rng = random.Random(seed)
        mesh = mesh_axes(text)
        startable = startable_ops(read)
        if not startable:
            continue
        base_starts = {op: random_start(rng, read, mesh, op, context)
                       for op in rng.sample(startable, min(len(startable), rng.randint(0, 1)))}
        base = read.recorded(plan, base_starts)
        candidates = [dict(base_starts), {}]
        for _ in range(4):
            starts = dict(base_starts)
            for op in rng.sample(startable, min(len(startable), rng.randint(1, 2))):
                starts[op] = random_start(rng, read, mesh, op, context)
            candidates.append(starts)
        for starts in candidates:
            fallbacks = base.fallbacks
            store = base.repropagate(starts)
            expected = read.propagate(plan, starts)
            assert store.value == expected.value, (seed, starts)
            assert store.sid == expected.sid and store.dirty == expected.dirty, (seed, starts)
            # Each op's ``sdy.sharding`` as the store holds it (the export's census reads
            # it), the starts' included, in a dict of the store's own.
            assert store.sharding_attrs == expected.sharding_attrs, (seed, starts)
            assert store.sharding_attrs is not read.store.sharding_attrs
            # What differs from the recorded run, for a caller that prices only that.
            assert base.changed == {slot for slot, (now, then) in
                                    enumerate(zip(store.sid, base.store.sid)) if now != then}
            checked += 1
            replayed += base.fallbacks == fallbacks
    assert checked >= 40 * 6
    # Most changes are followed, not propagated from scratch.
    assert replayed > checked // 2, (replayed, checked)


@pytest.mark.filterwarnings("ignore")
@pytest.mark.parametrize("name", ["conflict_mlp_deep", "transformer", "moe_routing"])
def test_repropagation_of_bench_models_equals_propagation_from_scratch(name):
    """Random single-sharding changes of a ``bench/models`` program as the cost-aware
    search reads it, each followed however far it reaches (``bench.repropagation``)."""
    read = repropagation.imported_read({**REGISTRY, **REGRESSIONS}[name]("small"))
    row = repropagation._check_read(name, read, 8)
    assert row["changes"] == 8 and row["identical"] == 8, row


@pytest.mark.filterwarnings("ignore")
def test_a_change_in_one_layer_recomputes_a_small_share_of_a_deep_model():
    """On the 16-layer transformer of ``bench/propagation.py`` a change that stays near
    its layer computes a few percent of the recorded visits; the result is the full run's."""
    read = repropagation.transformer_read(16)
    base = read.recorded("user-priority", {})
    followed = []
    for starts in repropagation.changes(read, 6, seed=1):
        events, fallbacks, ticks = base.events, base.fallbacks, base.ticks
        assert repropagation.identical(read, base, starts)
        if base.fallbacks == fallbacks:
            followed.append((base.events - events) / (base.ticks - ticks))
    assert len(followed) >= 3, followed
    assert sorted(followed)[len(followed) // 2] < 0.05, followed
