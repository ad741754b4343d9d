// Hand-written data-flow edges: capture-loop-invariants leaves a loop whose results
// feed edges alone (hoisting its invariant counter gave the counter's edge an input
// of several users, an internal error), and xla-form asks for the edges to be sunk.
// RUN: shardc-opt %s --shardc-capture-loop-invariants | filecheck %s
// RUN: not shardc-opt %s --shardc-xla-form 2>&1 | filecheck %s --check-prefix=XLA
// RUN: shardc-opt %s --shardc-sink-data-flow-edges --shardc-xla-form | filecheck %s --check-prefix=SUNK
// CHECK-NOT: internal error
// CHECK: %0:2 = stablehlo.while
// CHECK: sdy.data_flow_edge %0#1 : tensor<i32>
// XLA-NOT: internal error
// XLA: hand_written_data_flow_edges.mlir:[[# @LINE + 15]]:8: error: shardc-xla-form takes a module without data-flow edges; run shardc-sink-data-flow-edges first
// SUNK-NOT: sdy.data_flow_edge
// SUNK: return
sdy.mesh @mesh = <["a"=2, "b"=2]>
func.func @main(%arg0: tensor<8x4xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"a"}, {}]>}) -> tensor<8x4xf32> {
  %c = stablehlo.constant dense<0> : tensor<i32>
  %0:2 = stablehlo.while(%iterArg = %arg0, %iterArg_0 = %c) : tensor<8x4xf32>, tensor<i32>
   cond {
    %c_1 = stablehlo.constant dense<3> : tensor<i32>
    %3 = stablehlo.compare LT, %iterArg_0, %c_1 : (tensor<i32>, tensor<i32>) -> tensor<i1>
    stablehlo.return %3 : tensor<i1>
  } do {
    %3 = stablehlo.negate %iterArg : tensor<8x4xf32>
    stablehlo.return %3, %iterArg_0 : tensor<8x4xf32>, tensor<i32>
  }
  %1 = sdy.data_flow_edge %0#0 sharding=<@mesh, [{"a", ?}, {?}]> : tensor<8x4xf32>
  %2 = sdy.data_flow_edge %0#1 : tensor<i32>
  return %1 : tensor<8x4xf32>
}
