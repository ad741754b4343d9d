"""Bytes per device of each collective in a compiled HLO (``shardc.runtime.collectives``):
XLA prints operands by name only, so an operand's bytes are those its definition declares."""

import functools

import jax
import jax.numpy as jnp
from jax import lax
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from bench import e2e_measure
from shardc.compiler import jit
from shardc.runtime.collectives import find_collectives

HLO = """HloModule m

%region (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %add = f32[] add(%a, %b)
}

ENTRY %main (p: f32[4,4]) -> f32[4,1] {
  %p = f32[4,4]{1,0} parameter(0)
  %wrapped_copy = f32[4,4]{0,1} copy(%p)
  ROOT %reduce_scatter.7 = f32[4,1]{0,1} reduce-scatter(%wrapped_copy), channel_id=1, replica_groups={{0,1,2,3}}, dimensions={1}, to_apply=%region
}
"""


def test_reduce_scatter_counts_its_operand_named_by_reference():
    (scatter,) = find_collectives(HLO)
    assert (scatter.kind, scatter.bytes_per_device) == ("reduce-scatter", 64)  # f32[4,4], not f32[4,1]


def test_psum_scatter_bytes_are_its_operand_under_jax_jit_and_shardc_as_predicted():
    mesh = jax.make_mesh((2, 4), ("data", "model"), axis_types=(jax.sharding.AxisType.Auto,) * 2)
    x = jax.device_put(jnp.ones((8, 16)), NamedSharding(mesh, P("data", "model")))

    @functools.partial(jax.shard_map, mesh=mesh, in_specs=P("data", "model"),
                       out_specs=P("data", "model"))
    def scatter(block):  # (4, 4) per device; its (4, 4) products reduce-scattered over 'model'
        return lax.psum_scatter(block @ block.T, "model", scatter_dimension=1, tiled=True)

    lowered = jit(scatter).lower(x)
    for compiled in (jax.jit(scatter).lower(x).compile(), lowered.compile()):
        found = e2e_measure.collectives_of(compiled)["reduce-scatter"]
        assert (found.count, found.bytes_per_device) == (1, 4 * 4 * 4)
    assert e2e_measure.predict(lowered)["collectives"] == {"reduce-scatter": 4 * 4 * 4}


# XLA:TPU's asynchronous permute (v5e 16x16, the halo of a padded reduce-scatter):
# its start defines (operand, result, u32 context, u32 context).
ASYNC = """HloModule m

ENTRY %main (p: bf16[160,16]) -> bf16[160,16] {
  %p = bf16[160,16]{1,0} parameter(0)
  %collective-permute-start = (bf16[160,16]{1,0:T(8,128)(2,1)S(1)}, bf16[160,16]{1,0:T(8,128)(2,1)S(1)}, u32[]{:S(2)}, u32[]{:S(2)}) collective-permute-start(%p), channel_id=1, source_target_pairs={{0,1}}
  ROOT %collective-permute-done = bf16[160,16]{1,0} collective-permute-done(%collective-permute-start)
}
"""


def test_an_asynchronous_start_counts_its_result_not_its_tuple():
    (permute,) = find_collectives(ASYNC)
    assert (permute.kind, permute.bytes_per_device) == ("collective-permute", 160 * 16 * 2)
    gather = find_collectives(ASYNC.replace(
        "collective-permute-start(%p), channel_id=1, source_target_pairs={{0,1}}",
        "all-gather-start(%p), channel_id=1, dimensions={0}").replace(
        ", u32[]{:S(2)}, u32[]{:S(2)}) all-gather", ") all-gather").replace(
        "bf16[160,16]{1,0:T(8,128)(2,1)S(1)}) all-gather", "bf16[320,16]{1,0}) all-gather"))
    assert [(g.kind, g.bytes_per_device) for g in gather] == [("all-gather", 320 * 16 * 2)]
