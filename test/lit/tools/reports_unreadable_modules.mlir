// Modules the reports cannot read are errors at the op, naming the flag; each was
// an internal error (a ValueError, a PassError, a KeyError) without a location.
// RUN: not shardc-opt %s --split-input-file --comm-report --explain 2>&1 | filecheck %s
// CHECK-NOT: internal error

// CHECK: reports_unreadable_modules.mlir:[[# @LINE + 2]]:1: error: --comm-report / --explain needs meshes as sdy.mesh symbols, but 'arg_attrs' writes its mesh inline; run shardc-lift-inlined-meshes first
// CHECK-NOT: internal error
func.func @main(%arg0: tensor<8xf32> {sdy.sharding = #sdy.sharding<mesh<["x"=2]>, [{"x"}]>}) -> tensor<8xf32> {
  return %arg0 : tensor<8xf32>
}

// -----

// CHECK: error: --comm-report / --explain: expected a single func or one named 'main'
// CHECK-NOT: internal error
func.func @f(%arg0: tensor<8xf32>) -> tensor<8xf32> {
  return %arg0 : tensor<8xf32>
}
func.func @g(%arg0: tensor<8xf32>) -> tensor<8xf32> {
  return %arg0 : tensor<8xf32>
}

// -----

// Hand-written data-flow edges: explain's propagation adds no edge of an edge.
// CHECK: // value {{.*}} sharding
// CHECK: // %{{[0-9]+}} {{ *}}sdy.data_flow_edge {{.*}} [{"a"}, {}]
// CHECK-NOT: internal error
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
