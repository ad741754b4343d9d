// Import steps of the propagation pipeline.
// RUN: shardc-opt %s -split-input-file -sdy-propagation-pipeline | filecheck %s

// The import step drops size-one axes ("z"=1) from every sharding.
// CHECK: sdy.mesh @mesh = <["a"=4, "z"=1]> {stablehlo.mesh = {axes = [{name = "a", size = 4 : i64}, {name = "z", size = 1 : i64}]}}
// CHECK-NEXT: func.func @main(%arg0: tensor<8x4xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"a"}, {}]>}) -> (tensor<8x4xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"a"}, {}]>}) {
// CHECK-NEXT: %0 = stablehlo.negate %arg0 {sdy.sharding = #sdy.sharding_per_value<[<@mesh, [{"a"}, {}]>]>} : tensor<8x4xf32>
// CHECK-NEXT: return %0 : tensor<8x4xf32>
sdy.mesh @mesh = <["a"=4, "z"=1]>
func.func @main(%arg0: tensor<8x4xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"a"}, {"z"}]>}) -> tensor<8x4xf32> {
  %0 = stablehlo.negate %arg0 : tensor<8x4xf32>
  return %0 : tensor<8x4xf32>
}

// -----

// Calls are inlined before propagation (a documented difference: Shardy keeps
// the call as a named computation and exports it back to a call; the
// shardings are the same).
// CHECK: sdy.mesh @mesh = <["a"=2, "b"=2]> {stablehlo.mesh = {axes = [{name = "a", size = 2 : i64}, {name = "b", size = 2 : i64}]}}
// CHECK-NEXT: func.func @main(%arg0: tensor<8x4xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"a"}, {}]>}) -> (tensor<8x4xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"a"}, {}]>}) {
// CHECK-NEXT: %0 = stablehlo.negate %arg0 {sdy.sharding = #sdy.sharding_per_value<[<@mesh, [{"a"}, {}]>]>} : tensor<8x4xf32>
// CHECK-NEXT: return %0 : tensor<8x4xf32>
sdy.mesh @mesh = <["a"=2, "b"=2]>
func.func @main(%arg0: tensor<8x4xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"a"}, {}]>}) -> tensor<8x4xf32> {
  %0 = func.call @helper(%arg0) : (tensor<8x4xf32>) -> tensor<8x4xf32>
  return %0 : tensor<8x4xf32>
}
func.func private @helper(%arg0: tensor<8x4xf32>) -> tensor<8x4xf32> {
  %0 = stablehlo.negate %arg0 : tensor<8x4xf32>
  return %0 : tensor<8x4xf32>
}
