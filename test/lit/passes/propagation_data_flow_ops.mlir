// Data-flow ops through add-edges, basic propagation and sink-edges; every
// expected output below was checked equal to jaxlib's native passes.
// RUN: shardc-opt %s -split-input-file -sdy-add-data-flow-edges -sdy-basic-propagate -sdy-sink-data-flow-edges | filecheck %s

// A stablehlo.case result follows its branches' returned values, and the
// other branch's values follow it (data-flow edges).
// CHECK: sdy.mesh @mesh = <["a"=2, "b"=2]>
// CHECK-NEXT: func.func @main(%arg0: tensor<i32>, %arg1: tensor<8x4xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"a"}, {}]>}, %arg2: tensor<8x4xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"a", ?}, {?}]>}) -> (tensor<8x4xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"a", ?}, {?}]>}) {
// CHECK-NEXT: %0 = "stablehlo.case"(%arg0) ({
// CHECK-NEXT: stablehlo.return %arg1 : tensor<8x4xf32>
// CHECK-NEXT: }, {
// CHECK-NEXT: %1 = stablehlo.negate %arg2 {sdy.sharding = #sdy.sharding_per_value<[<@mesh, [{"a", ?}, {?}]>]>} : tensor<8x4xf32>
// CHECK-NEXT: stablehlo.return %1 : tensor<8x4xf32>
// CHECK-NEXT: }) {sdy.sharding = #sdy.sharding_per_value<[<@mesh, [{"a", ?}, {?}]>]>} : (tensor<i32>) -> tensor<8x4xf32>
// CHECK-NEXT: return %0 : tensor<8x4xf32>
sdy.mesh @mesh = <["a"=2, "b"=2]>
func.func @main(%arg0: tensor<i32>, %arg1: tensor<8x4xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"a"}, {}]>}, %arg2: tensor<8x4xf32>) -> tensor<8x4xf32> {
  %0 = "stablehlo.case"(%arg0) ({
    stablehlo.return %arg1 : tensor<8x4xf32>
  }, {
    %1 = stablehlo.negate %arg2 : tensor<8x4xf32>
    stablehlo.return %1 : tensor<8x4xf32>
  }) : (tensor<i32>) -> tensor<8x4xf32>
  return %0 : tensor<8x4xf32>
}

// -----

// A named computation's edges carry shardings in and out of its body.
// CHECK: sdy.mesh @mesh = <["a"=2, "b"=2]>
// CHECK-NEXT: func.func @main(%arg0: tensor<8x4xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"a"}, {"b"}]>}) -> (tensor<8x4xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"a", ?}, {"b", ?}]>}) {
// CHECK-NEXT: %0 = sdy.named_computation<"body">(%arg0) in_shardings=[<@mesh, [{"a", ?}, {"b", ?}]>] out_shardings=[<@mesh, [{"a", ?}, {"b", ?}]>] (%arg1: tensor<8x4xf32>) {
// CHECK-NEXT: %2 = stablehlo.abs %arg1 {sdy.sharding = #sdy.sharding_per_value<[<@mesh, [{"a", ?}, {"b", ?}]>]>} : tensor<8x4xf32>
// CHECK-NEXT: sdy.return %2 : tensor<8x4xf32>
// CHECK-NEXT: } : (tensor<8x4xf32>) -> tensor<8x4xf32>
// CHECK-NEXT: %1 = stablehlo.negate %0 {sdy.sharding = #sdy.sharding_per_value<[<@mesh, [{"a", ?}, {"b", ?}]>]>} : tensor<8x4xf32>
// CHECK-NEXT: return %1 : tensor<8x4xf32>
sdy.mesh @mesh = <["a"=2, "b"=2]>
func.func @main(%arg0: tensor<8x4xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"a"}, {"b"}]>}) -> tensor<8x4xf32> {
  %0 = sdy.named_computation<"body">(%arg0) (%arg1: tensor<8x4xf32>) {
    %1 = stablehlo.abs %arg1 : tensor<8x4xf32>
    sdy.return %1 : tensor<8x4xf32>
  } : (tensor<8x4xf32>) -> tensor<8x4xf32>
  %2 = stablehlo.negate %0 : tensor<8x4xf32>
  return %2 : tensor<8x4xf32>
}

// -----

// Tokens have no sharding: the barrier's token result gets the rank-0
// placeholder, the tensor result the propagated sharding.
// CHECK: sdy.mesh @mesh = <["a"=2, "b"=2]>
// CHECK-NEXT: func.func @main(%arg0: !stablehlo.token, %arg1: tensor<8x4xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"a"}, {}]>}) -> (!stablehlo.token, tensor<8x4xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"a", ?}, {?}]>}) {
// CHECK-NEXT: %0:2 = stablehlo.optimization_barrier {sdy.sharding = #sdy.sharding_per_value<[<@mesh, []>, <@mesh, [{"a", ?}, {?}]>]>} %arg0, %arg1 : !stablehlo.token, tensor<8x4xf32>
// CHECK-NEXT: %1 = stablehlo.negate %0#1 {sdy.sharding = #sdy.sharding_per_value<[<@mesh, [{"a", ?}, {?}]>]>} : tensor<8x4xf32>
// CHECK-NEXT: return %0#0, %1 : !stablehlo.token, tensor<8x4xf32>
sdy.mesh @mesh = <["a"=2, "b"=2]>
func.func @main(%arg0: !stablehlo.token, %arg1: tensor<8x4xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"a"}, {}]>}) -> (!stablehlo.token, tensor<8x4xf32>) {
  %0:2 = stablehlo.optimization_barrier %arg0, %arg1 : !stablehlo.token, tensor<8x4xf32>
  %1 = stablehlo.negate %0#1 : tensor<8x4xf32>
  return %0#0, %1 : !stablehlo.token, tensor<8x4xf32>
}
