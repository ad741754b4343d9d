"""Differential test: shardc-lift-inlined-meshes against jaxlib's native sdy pass.

The native ``sdy-lift-inlined-meshes`` is the oracle (tests only); both outputs
are printed by the MLIR printer and must be identical text.
"""

from __future__ import annotations

import pytest
from jaxlib.mlir import ir, passmanager

from shardc.dialects import make_context
from shardc.tools import pass_pipeline

CASES = {
    "shared_and_empty": """
func.func @f(%a: tensor<8x8xf32> {sdy.sharding = #sdy.sharding<mesh<["x"=2, "y"=4]>, [{"x"}, {}]>},
             %b: tensor<8x8xf32> {sdy.sharding = #sdy.sharding<mesh<["x"=2, "y"=4]>, [{}, {"y"}]>})
    -> (tensor<8x8xf32> {sdy.sharding = #sdy.sharding<mesh<[]>, [{}, {}]>}) {
  %0 = stablehlo.add %a, %b : tensor<8x8xf32>
  return %0 : tensor<8x8xf32>
}""",
    "existing_maximal_device_ids": """
sdy.mesh @mesh = <["a"=4]>
func.func @f(%a: tensor<8x8xf32>) -> tensor<8x8xf32> {
  %0 = stablehlo.add %a, %a {sdy.sharding = #sdy.sharding_per_value<[<mesh<["a"=4]>, [{"a"}, {}]>]>} : tensor<8x8xf32>
  %1 = stablehlo.custom_call @foo(%0) {sdy.sharding = #sdy.sharding_per_value<[<mesh<[], device_ids=[3]>, []>]>} : (tensor<8x8xf32>) -> tensor<8x8xf32>
  %2 = sdy.reshard %1 <mesh<["z"=8]>, [{"z"}, {}]> : tensor<8x8xf32>
  %3 = sdy.sharding_constraint %2 <mesh<["x"=2, "y"=4], device_ids=[7,6,5,4,3,2,1,0]>, [{}, {}]> : tensor<8x8xf32>
  return %3 : tensor<8x8xf32>
}""",
    "name_clashes_and_manual": """
func.func @mesh(%a: tensor<8x8xf32> {sdy.sharding = #sdy.sharding<mesh<["x"=2]>, [{"x"}, {}]>}) -> tensor<8x8xf32> {
  %0 = sdy.manual_computation(%a) in_shardings=[<mesh<["q"=2]>, [{"q"}, {}]>] out_shardings=[<mesh<["q"=2]>, [{"q"}, {}]>] manual_axes={"q"} (%x: tensor<4x8xf32>) {
    sdy.return %x : tensor<4x8xf32>
  } : (tensor<8x8xf32>) -> tensor<8x8xf32>
  return %0 : tensor<8x8xf32>
}
sdy.mesh @mesh_0 = <["k"=2]>
func.func @maximal_mesh_3(%a: tensor<8xf32> {sdy.sharding = #sdy.sharding<mesh<[], device_ids=[3]>, []>}) -> tensor<8xf32> {
  return %a : tensor<8xf32>
}""",
    "duplicates_merged": """
func.func @f(%a: tensor<8xf32> {sdy.sharding = #sdy.sharding<@c, [{}]>}) -> tensor<8xf32> {
  %0 = sdy.all_gather [{}] %a out_sharding=<mesh<["y"=2]>, [{}]> : tensor<8xf32>
  %1 = sdy.named_computation<"foo">(%0) in_shardings=[<mesh<["y"=2]>, [{}]>] out_shardings=[<@d, [{}]>] (%x: tensor<8xf32>) {
    sdy.return %x : tensor<8xf32>
  } : (tensor<8xf32>) -> tensor<8xf32>
  return %1 : tensor<8xf32>
}
sdy.mesh @a = <["y"=2]>
sdy.mesh @c = <["y"=2]>
sdy.mesh @d = <["y"=2]>
sdy.mesh @e = <["x"=2]>""",
    "no_inline_meshes": """
func.func @g(%a: tensor<8xf32>) -> tensor<8xf32> {
  return %a : tensor<8xf32>
}
sdy.mesh @m = <["k"=2]>""",
    "named_module_and_multi_result": """
module @named attributes {foo.bar = 1} {
func.func @g(%a: tensor<8xf32> {sdy.sharding = #sdy.sharding<mesh<["a"=2, "b"=1]>, [{"a", ?}]>}) -> tensor<8xf32> {
  %1:2 = stablehlo.custom_call @x(%a) {sdy.sharding = #sdy.sharding_per_value<[<mesh<["a"=2, "b"=1]>, [{}]>, <mesh<[]>, [{}]>]>} : (tensor<8xf32>) -> (tensor<8xf32>, tensor<8xf32>)
  return %1#0 : tensor<8xf32>
}
}""",
}


def _run(text: str, build) -> str:
    with make_context() as context:
        module = ir.Module.parse(text, context)
        build().run(module.operation)
        return str(module)


@pytest.mark.parametrize("name", sorted(CASES))
def test_matches_native_pass(name: str) -> None:
    native = _run(
        CASES[name],
        lambda: passmanager.PassManager.parse("builtin.module(sdy-lift-inlined-meshes)"),
    )
    ours = _run(
        CASES[name],
        lambda: pass_pipeline.build(pass_pipeline.parse_pipeline("shardc-lift-inlined-meshes")),
    )
    assert ours == native
