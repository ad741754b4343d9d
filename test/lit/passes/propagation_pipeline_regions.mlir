// RUN: shardc-opt %s --split-input-file -sdy-propagation-pipeline | filecheck %s
// RUN: shardc-opt %s --split-input-file --shardc-export-pipeline | filecheck %s --check-prefix=EXPORT

// Equal constants in the cond and the body of a while share the while as
// their parent op but not a block: each region keeps its own copy (a merged
// one would not dominate the other region's uses).
// CHECK-LABEL: func @while_regions(
// CHECK:       stablehlo.while
// CHECK:       cond {
// CHECK-NEXT:    %[[C1:.*]] = sdy.constant dense<3>
// CHECK-NEXT:    stablehlo.compare LT, %{{.*}}, %[[C1]]
// CHECK:       } do {
// CHECK-NEXT:    %[[C2:.*]] = sdy.constant dense<3>
// CHECK-NEXT:    stablehlo.subtract %[[C2]]
// EXPORT-LABEL: func @while_regions(
// EXPORT:       cond {
// EXPORT-NEXT:    %[[C1:.*]] = stablehlo.constant dense<3>
// EXPORT-NEXT:    stablehlo.compare LT, %{{.*}}, %[[C1]]
// EXPORT:       } do {
// EXPORT-NEXT:    %[[C2:.*]] = stablehlo.constant dense<3>
// EXPORT-NEXT:    stablehlo.subtract %[[C2]]
sdy.mesh @mesh = <["x"=4]>
func.func @while_regions(%arg0: tensor<8xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"x"}]>}) -> tensor<8xf32> {
  %c = stablehlo.constant dense<0> : tensor<i32>
  %0:2 = stablehlo.while(%i = %c, %x = %arg0) : tensor<i32>, tensor<8xf32>
  cond {
    %c3 = stablehlo.constant dense<3> : tensor<i32>
    %p = stablehlo.compare LT, %i, %c3, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
    stablehlo.return %p : tensor<i1>
  } do {
    %c3 = stablehlo.constant dense<3> : tensor<i32>
    %j = stablehlo.subtract %c3, %i : tensor<i32>
    %y = stablehlo.add %x, %x : tensor<8xf32>
    stablehlo.return %j, %y : tensor<i32>, tensor<8xf32>
  }
  return %0#1 : tensor<8xf32>
}

// -----

// The branches of a case, and a scalar broadcast in each: one copy per branch.
// CHECK-LABEL: func @case_branches(
// CHECK:       stablehlo.case
// CHECK-NEXT:    %[[C1:.*]] = sdy.constant dense<2.000000e+00>
// CHECK-NEXT:    %[[B1:.*]] = stablehlo.broadcast_in_dim %[[C1]]
// CHECK-NEXT:    stablehlo.multiply %arg1, %[[B1]]
// CHECK:       }, {
// CHECK-NEXT:    %[[C2:.*]] = sdy.constant dense<2.000000e+00>
// CHECK-NEXT:    %[[B2:.*]] = stablehlo.broadcast_in_dim %[[C2]]
// CHECK-NEXT:    stablehlo.add %arg1, %[[B2]]
sdy.mesh @mesh = <["x"=4]>
func.func @case_branches(%arg0: tensor<i32>, %arg1: tensor<8xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"x"}]>}) -> tensor<8xf32> {
  %0 = "stablehlo.case"(%arg0) ({
    %c = stablehlo.constant dense<2.0> : tensor<f32>
    %b = stablehlo.broadcast_in_dim %c, dims = [] : (tensor<f32>) -> tensor<8xf32>
    %m = stablehlo.multiply %arg1, %b : tensor<8xf32>
    stablehlo.return %m : tensor<8xf32>
  }, {
    %c = stablehlo.constant dense<2.0> : tensor<f32>
    %b = stablehlo.broadcast_in_dim %c, dims = [] : (tensor<f32>) -> tensor<8xf32>
    %a = stablehlo.add %arg1, %b : tensor<8xf32>
    stablehlo.return %a : tensor<8xf32>
  }) : (tensor<i32>) -> tensor<8xf32>
  return %0 : tensor<8xf32>
}

// -----

// Copies in one block still merge, in a nested body as at the top level.
// CHECK-LABEL: func @same_block(
// CHECK:       } do {
// CHECK-NEXT:    %[[C:.*]] = sdy.constant dense<1>
// CHECK-NEXT:    %[[A:.*]] = stablehlo.add %{{.*}}, %[[C]]
// CHECK-NEXT:    %[[B:.*]] = stablehlo.add %[[A]], %[[C]]
sdy.mesh @mesh = <["x"=4]>
func.func @same_block(%arg0: tensor<8xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"x"}]>}) -> tensor<8xf32> {
  %c = stablehlo.constant dense<0> : tensor<i32>
  %0:2 = stablehlo.while(%i = %c, %x = %arg0) : tensor<i32>, tensor<8xf32>
  cond {
    %c3 = stablehlo.constant dense<3> : tensor<i32>
    %p = stablehlo.compare LT, %i, %c3, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
    stablehlo.return %p : tensor<i1>
  } do {
    %c1 = stablehlo.constant dense<1> : tensor<i32>
    %j = stablehlo.add %i, %c1 : tensor<i32>
    %c1b = stablehlo.constant dense<1> : tensor<i32>
    %k = stablehlo.add %j, %c1b : tensor<i32>
    %y = stablehlo.add %x, %x : tensor<8xf32>
    stablehlo.return %k, %y : tensor<i32>, tensor<8xf32>
  }
  return %0#1 : tensor<8xf32>
}
