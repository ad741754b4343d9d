"""Where each collective XLA emits comes from: the jax op and the user's source line
(``Compiled.explain_collectives()``, read from the partitioned HLO's metadata)."""

import json

import pytest

from bench import e2e_measure
from bench.zoo import make_programs
from shardc.runtime.collectives import find_collectives, stack_frames

HLO = """HloModule m

FileNames
1 "/home/me/model.py"

FunctionNames
1 "Block.__call__"

FileLocations
1 {file_name_id=1 function_name_id=1 line=42 end_line=42 column=8 end_column=20}

StackFrames
1 {file_location_id=1 parent_frame_id=1}

ENTRY %main (p: f32[4,8]) -> f32[4,8] {
  %p = f32[4,8]{1,0} parameter(0)
  ROOT %all-reduce = f32[4,8]{1,0} all-reduce(%p), channel_id=1, replica_groups={{0,1}}, to_apply=%add, metadata={op_name="jit(step)/block/dot_general" stack_frame_id=1}
  %all-gather = f32[8,8]{1,0} all-gather(%p), dimensions={0}, metadata={op_name="gather"}
}
"""


def test_metadata_names_the_op_and_the_source_frame():
    frames = stack_frames(HLO)
    assert str(frames[1]) == "/home/me/model.py:42:8 (Block.__call__)"
    reduce, gather = find_collectives(HLO)
    assert (reduce.kind, reduce.bytes_per_device) == ("all-reduce", 128)
    assert reduce.op_name == "jit(step)/block/dot_general" and reduce.source == frames[1]
    assert gather.op_name == "gather" and gather.source is None  # XLA recorded no frame


@pytest.fixture(scope="module")
def lm_table():
    (program,) = make_programs("small", ["lm_linen"])
    with e2e_measure.mesh_context(program):
        return e2e_measure.build(program, "shardc").compiled.explain_collectives()


def test_every_collective_of_the_lm_names_its_op_and_line(lm_table):
    assert len(lm_table.entries) >= 30
    assert all(entry.op_name and entry.source for entry in lm_table.entries)


def test_lm_embedding_lookup_collectives_point_at_the_embed_layer(lm_table):
    # jax lowers the lookup inside its private `_take` function, whose gather has
    # no position of its own; shardc's inlining gives it the call's (flax's Embed).
    lookups = [e for e in lm_table.entries if e.op_name in ("gather", "scatter-add")]
    assert {e.kind for e in lookups} >= {"all-to-all", "all-reduce", "all-gather"}
    assert all(e.source.function == "Embed.__call__" for e in lookups)


def test_lm_tensor_parallel_all_reduce_points_at_the_dense_layer(lm_table):
    # The row-parallel `out` projection of each attention block all-reduces its
    # partial sums over `model`: flax's Dense.__call__ traced the dot.
    found = [e for e in lm_table.entries
             if e.kind == "all-reduce" and e.op_name.endswith("block_0/attention/out/dot_general")]
    assert len(found) == 1
    (entry,) = found
    assert entry.source.file.endswith("flax/linen/linear.py")
    assert entry.source.function == "Dense.__call__"
    text = lm_table.format_text()
    assert "all-reduce" in text and "linear.py" in text and "(Dense.__call__)" in text
    data = json.loads(lm_table.to_json())
    assert len(data) == len(lm_table.entries)
    assert set(data[0]["source"]) == {"file", "line", "column", "function"}
