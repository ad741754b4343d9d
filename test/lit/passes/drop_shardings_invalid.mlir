// RUN: shardc-opt %s --split-input-file --shardc-drop-shardings='strict=true' --verify-diagnostics

// With strict=true an op that must keep its shardings fails the pass.
sdy.mesh @mesh = <["q"=2]>
func.func @manual(%arg0: tensor<8xf32>) -> tensor<8xf32> {
  // expected-error@+1 {{'sdy.manual_computation' keeps its shardings: without them it has no meaning}}
  %0 = sdy.manual_computation(%arg0) in_shardings=[<@mesh, [{"q"}]>] out_shardings=[<@mesh, [{"q"}]>] manual_axes={"q"} (%a: tensor<4xf32>) {
    sdy.return %a : tensor<4xf32>
  } : (tensor<8xf32>) -> tensor<8xf32>
  return %0 : tensor<8xf32>
}
