"""The liveness walk is linear in the program: figures unchanged, fused chains walked once."""

import jax
import jax.numpy as jnp
import pytest

import shardc.compiler as sc

# (argument, output, temp, alias) bytes per device the walk gives for these
# programs (first those of the recursive walk, one visit per path through a fused
# chain: exponential in its length; re-pinned when the model's rules change: the
# heap packing and what XLA:CPU materialises, see test_memory_effects.py); the
# memoised walk must give the same.
# Tables of pointers in allocations of their own, after the arrays' heap, as XLA:CPU
# lays out tuple-shaped buffers: closer to XLA's temp for mlp_data_parallel (49280
# -> 49248, XLA's own), fsdp_train_step, scan_rnn and the tiny Llama steps; farther
# for those whose arrays the estimate over-counts already: conv_net, decode_kv_cache
# and moe_routing (+16 to +32 bytes: a combined all-reduce's table no longer in a
# gap), grad_loops (17664 -> 17984, XLA 16576), grad_loops_unrolled (21312 -> 21824,
# XLA 18880), pipeline_shard_map (12864 -> 13136, XLA 10872) and dropout_cond (4672
# -> 5648, XLA 4944: its 16 tables are XLA's 16, of the same sizes; its arrays take
# 4544 bytes to XLA's 3780). A branch's partial sums reduced into the conditional's
# result are buffers as any other, placed in an output's allocation: dropout_cond
# 5648 -> 4880 (XLA 4944).
# A gather read by several kernels is a buffer (XLA's ``IsExpensive``): e3nn's
# message gradient 0.73 -> 0.84 of XLA's net; farther for decode_kv_cache, whose
# cache lookup XLA keeps in no buffer of its own (10768 -> 11024, XLA 8656; net 1.04).
# A reduce of no element is a reshape, an update written into zeros a pad
# (``simplified``, ``LivenessWalker.padded``): moe_routing 13776 -> 13712 and
# shard_map_pipeline 5184 -> 4160, both towards XLA (net 1.014 -> 1.013, 1.053 -> 1.003).
BEFORE = {
    "mlp_data_parallel": (53248, 49188, 49248, 0),
    "mlp_megatron": (68352, 2048, 4096, 0),
    "fsdp_train_step": (32960, 24828, 201752, 0),
    "transformer": (108544, 8192, 18432, 0),
    "conv_net": (18416, 6148, 279776, 0),
    "embedding_scatter": (10368, 8464, 10432, 0),
    "moe_routing": (37888, 4096, 13712, 0),
    "scan_rnn": (7488, 528, 5688, 0),
    "shard_map_pipeline": (14336, 2048, 4160, 0),
    "abstract_mesh_constraint": (33792, 1024, 18432, 0),
    "conflict_mlp": (270336, 8192, 2195456, 0),
    "conflict_attention": (98304, 32768, 819200, 0),
    "conflict_attention_seq": (98304, 32768, 1048576, 0),
    "conflict_mlp_deep": (787456, 1024, 3223552, 0),
    "grad_loops": (12288, 14404, 17984, 0),
    "grad_loops_unrolled": (12288, 14404, 21824, 0),
    "decode_kv_cache": (49164, 8744, 11024, 8192),
    "pipeline_shard_map": (5184, 3180, 13136, 0),
    "dropout_cond": (2380, 2164, 4880, 0),
}


def _figures(estimate):
    return (estimate.argument_bytes, estimate.output_bytes, estimate.temp_bytes,
            estimate.alias_bytes)


@pytest.fixture(scope="module")
def programs():
    from bench import memory_estimate

    return {p.name: p for p in memory_estimate.make_programs("small", list(BEFORE))}


@pytest.mark.parametrize("name", sorted(BEFORE))
def test_estimate_unchanged_on_benchmark_programs(programs, name):
    from bench import memory_estimate

    estimate = memory_estimate.lower(programs[name]).memory_estimate()
    assert _figures(estimate) == BEFORE[name]


# A 2-layer Llama-shaped train step (bench/plan_speed.py, tiny dimensions) on an
# abstract mesh of (data=4, model=16): unrolled, scanned, and scanned with
# jax.checkpoint, whose recomputed forward made the recursive walk never finish
# for a 7B-shaped model.
# comm_report gathers a contraction on an axis its result uses a sub-axis of (the
# heads on "model":(1)4), as XLA does, where it kept partial sums: the unrolled and
# remat estimates grow towards XLA's temporaries (145984 -> 150080, XLA 204328;
# 100992 -> 103040, XLA 136664). A value read through a sharding constraint by dots
# is a buffer as an unconstrained one is (the unrolled step's constrained
# activations): 150080 -> 152128. An elementwise fusion written over its dying
# operand moves the unrolled step away (152128 -> 148160, XLA 204328) and the
# scanned one towards XLA (215488 -> 215744, XLA 277520): XLA shares those buffers
# (the llama_unrolled_bf16@64 bench: 1.03 -> 1.01). All-reduces combined as XLA's
# combiner walks the step (post order, one all-reduce per axis of a sum over
# several) move the unrolled step towards XLA (148160 -> 150080). The loops' and
# combined all-reduces' tables laid after the arrays' heap: all three towards XLA
# (+500 to +950 bytes). The embedding gradient's scatter-add all-reduced over the
# axes XLA's scatter handler sums over (a sub-axis of "model"), not the factor
# model's "data": -8, -320 and -320 bytes (that scatter alone at 64 devices,
# 4096 rows: 1.13x -> 1.01x XLA's temporaries). The causal mask XLA hoists out of
# the rematerialised step's backward loop (loop-invariant code motion) moves it
# towards XLA (+136 bytes, XLA 136664). That scatter's table replicated across index
# groups of a sub-axis keeps only the rest of its whole axis, as XLA's
# GroupShardingOnReplicatedDim does, so its partial sums are a larger shard: all
# three towards XLA (+384, +384, +128 bytes). A reduce over unit dimensions is a
# reshape (XLA's ``HandleReduce``), a view of its operand's buffer: the scanned and
# rematerialised steps -256 bytes each (their 64-device bench rows move by < 0.001).
TINY_BEFORE = {
    "unrolled": (8704, 8628, 150952, 0),
    "scan": (8704, 8556, 216560, 0),
    "remat": (8704, 8556, 103344, 0),
}


@pytest.mark.parametrize("variant", sorted(TINY_BEFORE))
def test_estimate_unchanged_on_tiny_llama_step(variant):
    from bench import plan_speed

    mesh = plan_speed.mesh_of(64)
    args = plan_speed.abstract_args(variant, mesh, 2, d=64, ffn=128, vocab=256, seq=16, batch=8)
    lowered = sc.jit(plan_speed.make_step(variant, 2, 4, mesh)).trace(*args).lower(
        lowering_platforms=("cpu",))
    assert _figures(lowered.memory_estimate()) == TINY_BEFORE[variant]


def _chain(n):
    def f(x):
        x = x @ x  # a buffer, read through the fused chain below
        for _ in range(n):
            x = x * 2 + x * 3  # each value read twice, by fused users: 2**n paths
        return x

    return f


@pytest.mark.parametrize("n", [20, 200])
def test_fused_chain_is_walked_once(n):
    # Walking every path, n=16 took 4 s, n=20 45 s, and n=200 would never finish.
    x = jnp.ones((64, 64))
    estimate = sc.jit(_chain(n)).lower(x).memory_estimate()
    stats = jax.jit(_chain(n)).lower(x).compile().memory_analysis()
    assert estimate.argument_bytes == stats.argument_size_in_bytes
    assert estimate.output_bytes == stats.output_size_in_bytes
    # The dot's buffer, live to the end of the chain, is read elementwise by the
    # output's writer, which XLA writes over it (in the output's allocation).
    assert estimate.temp_bytes == stats.temp_size_in_bytes == 0


def test_every_branch_counts_where_a_branchs_intervals_take_freed_ids(programs, monkeypatch):
    """A case's branches are walked one after another, each branch's intervals
    copied and then freed: CPython may give the next branch's intervals the freed
    ones' memory, so their ids. Here each branch's intervals take the objects of
    the branch walked before, as that reuse does; dropout_cond's estimate (a
    switch in the backward) stays the one without reuse."""
    import sys

    from bench import memory_estimate
    from shardc.compiler.explain import liveness

    expected = _figures(memory_estimate.lower(programs["dropout_cond"]).memory_estimate())
    peak = liveness.LivenessWalker.peak
    freed: list = []

    def reusing_peak(self, ops, returned, record=None, **kwargs):
        result = peak(self, ops, returned, record, **kwargs)
        if record is None or sys._getframe(1).f_code.co_name != "_flattened_body":
            return result
        taken = {id(new): old for new, old in zip(record, freed)}
        for k, new in enumerate(record[:len(freed)]):
            old = taken[id(new)]
            vars(old).clear()
            vars(old).update(vars(new))
            record[k] = old
        for interval in record:
            if interval.over is not None and id(interval.over) in taken:
                interval.over = taken[id(interval.over)]
        freed[:] = record
        return result

    monkeypatch.setattr(liveness.LivenessWalker, "peak", reusing_peak)
    reused = _figures(memory_estimate.lower(programs["dropout_cond"]).memory_estimate())
    assert reused == expected == BEFORE["dropout_cond"]
