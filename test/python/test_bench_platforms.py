"""``bench.platforms`` reads XLA:TPU's optimized HLO per step (no libtpu needed here)."""

from __future__ import annotations

from bench import platforms

# The shapes of XLA:TPU's module for a Llama-shaped step, cut down: an all-gather
# split into its start fusion and a step overlapped with compute (one channel id),
# and a windowed einsum's loop of 8 trips with two collective-permutes per trip
# plus one after it.
HLO = """\
HloModule jit_step

%fused_computation.1 (param_0.1: bf16[128,128]) -> bf16[2048,128] {
  %param_0.1 = bf16[128,128]{1,0} parameter(0)
  ROOT %all-gather.1 = bf16[2048,128]{1,0} all-gather(%param_0.1), channel_id=20, dimensions={0}
}

%async_collective_fusion.2 (param_0.2: bf16[128,128]) -> bf16[2048,128] {
  %param_0.2 = bf16[128,128]{1,0} parameter(0)
  ROOT %all-gather.2 = bf16[2048,128]{1,0} all-gather(%param_0.2), channel_id=20, dimensions={0}
}

%windowed_dot_general_cond_rs (param.3: (bf16[128,512], u32[])) -> pred[] {
  %param.3 = (bf16[128,512]{1,0}, u32[]) parameter(0)
  %constant.3 = u32[] constant(8)
  %get-tuple-element.3 = u32[] get-tuple-element(%param.3), index=1
  ROOT %compare.3 = pred[] compare(%get-tuple-element.3, %constant.3), direction=LT
}

%windowed_dot_general_body_rs (param.4: (bf16[128,512], u32[])) -> (bf16[128,512], u32[]) {
  %param.4 = (bf16[128,512]{1,0}, u32[]) parameter(0)
  %get-tuple-element.4 = bf16[128,512]{1,0} get-tuple-element(%param.4), index=0
  %collective-permute.4 = bf16[128,512]{1,0} collective-permute(%get-tuple-element.4), channel_id=31, source_target_pairs={{0,1},{1,0}}
  %collective-permute.5 = bf16[128,512]{1,0} collective-permute(%collective-permute.4), channel_id=32, source_target_pairs={{0,1},{1,0}}
  %get-tuple-element.5 = u32[] get-tuple-element(%param.4), index=1
  ROOT %tuple.4 = (bf16[128,512]{1,0}, u32[]) tuple(%collective-permute.5, %get-tuple-element.5)
}

ENTRY %main (p0: bf16[128,128], p1: (bf16[128,512], u32[])) -> bf16[128,512] {
  %p0 = bf16[128,128]{1,0} parameter(0)
  %p1 = (bf16[128,512]{1,0}, u32[]) parameter(1)
  %fusion.1 = bf16[2048,128]{1,0} fusion(%p0), kind=kCustom, calls=%fused_computation.1
  %fusion.2 = bf16[2048,128]{1,0} fusion(%p0), kind=kCustom, calls=%async_collective_fusion.2
  %while.1 = (bf16[128,512]{1,0}, u32[]) while(%p1), condition=%windowed_dot_general_cond_rs, body=%windowed_dot_general_body_rs
  %get-tuple-element.6 = bf16[128,512]{1,0} get-tuple-element(%while.1), index=0
  ROOT %collective-permute.6 = bf16[128,512]{1,0} collective-permute(%get-tuple-element.6), channel_id=33, source_target_pairs={{0,1},{1,0}}
}
"""


def test_step_collectives_counts_a_split_collective_once_and_loop_bodies_per_trip():
    chunk = 128 * 512 * 2
    assert platforms.step_collectives(HLO) == {
        "all-gather": (1, 2048 * 128 * 2),
        "collective-permute": (2 * 8 + 1, (2 * 8 + 1) * chunk),
    }


def test_a_known_trip_count_is_read_before_the_conditions_bound():
    known = HLO.replace("body=%windowed_dot_general_body_rs",
                        'body=%windowed_dot_general_body_rs, '
                        'backend_config={"known_trip_count":{"n":"3"}}')
    assert platforms.step_collectives(known)["collective-permute"][0] == 2 * 3 + 1


def test_distinct_collectives_sharing_a_channel_id_count_each():
    # XLA:TPU gives the combined reduce-scatters of a step's weight gradients one
    # channel id (channel_id=1 in each of its all-reduce-scatter fusions, called by
    # fusions of different gradients; v5e 16x16, 1b at "data" 64 x "model" 4): each
    # runs, where a split collective's copies (``HLO``'s all-gather) run once.
    scatter = """\
%all-reduce-scatter.NAME (input: bf16[512,512]) -> bf16[128,512] {
  %input = bf16[512,512]{1,0} parameter(0)
  %all-reduce.NAME = bf16[512,512]{1,0} all-reduce(%input), channel_id=1, replica_groups={{0,4,8,12}}, to_apply=%add
  ROOT %dynamic-slice.NAME = bf16[128,512]{1,0} dynamic-slice(%all-reduce.NAME, %i, %j), dynamic_slice_sizes={128,512}
}
"""
    hlo = "HloModule m\n\n" + "".join(scatter.replace("NAME", str(k)) for k in (1, 2)) + """
ENTRY %main (p: bf16[512,512], q: bf16[512,512]) -> (bf16[128,512], bf16[128,512]) {
  %p = bf16[512,512]{1,0} parameter(0)
  %q = bf16[512,512]{1,0} parameter(1)
  %fusion.1 = bf16[128,512]{1,0} fusion(%p), kind=kCustom, calls=%all-reduce-scatter.1
  %fusion.2 = bf16[128,512]{1,0} fusion(%q), kind=kCustom, calls=%all-reduce-scatter.2
  ROOT %tuple = (bf16[128,512]{1,0}, bf16[128,512]{1,0}) tuple(%fusion.1, %fusion.2)
}
"""
    assert platforms.step_collectives(hlo) == {"reduce-scatter": (2, 2 * 512 * 512 * 2)}


def test_an_asynchronous_permute_counts_its_result_not_its_start_tuple():
    # XLA:TPU's asynchronous permute (v5e 16x16, 1b at "data" 128 x "model" 2: the halo
    # of the embedding gradient's padded reduce-scatter): its start defines (operand,
    # result, u32 context, u32 context); the step moves the result's bytes.
    hlo = """\
HloModule m

ENTRY %main (p: bf16[160,16]) -> bf16[160,16] {
  %p = bf16[160,16]{1,0} parameter(0)
  %collective-permute-start = (bf16[160,16]{1,0:T(8,128)(2,1)S(1)}, bf16[160,16]{1,0:T(8,128)(2,1)S(1)}, u32[]{:S(2)}, u32[]{:S(2)}) collective-permute-start(%p), channel_id=1, source_target_pairs={{0,1}}
  ROOT %collective-permute-done = bf16[160,16]{1,0} collective-permute-done(%collective-permute-start)
}
"""
    assert platforms.step_collectives(hlo) == {"collective-permute": (1, 160 * 16 * 2)}


def test_the_zoo_summary_counts_rows_within_tolerance_and_programs_not_compiled():
    # Every kind within 5% of XLA:TPU's bytes and net memory within 10% of its HBM;
    # a program that did not compile for TPU counts in neither, and is named.
    memory = {"argument": 10, "output": 10, "temp": 80, "net": 100}
    close = platforms.Row("close", {}, {"all-reduce": (1, 1040)}, {"all-reduce": (1, 1000)},
                          memory, dict(memory, net=95, vmem=0))
    far = platforms.Row("far", {}, {"reduce-scatter": (1, 1000)}, {"all-reduce": (1, 1000)},
                        memory, dict(memory, net=300, vmem=0))
    text = platforms.summary([close, far], {"callback": "ValueError: host callback"})
    assert "1040/1000" in text and "1000/0" in text
    assert "callback" in text and "not compiled for TPU: ValueError: host callback" in text
    assert text.splitlines()[-1] == ("every kind within 5%: 1 of 3; net memory within 10%: "
                                     "1 of 3; not compiled for TPU: 1")
