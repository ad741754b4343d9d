// RUN: shardc-opt %s -shardc-populate-op-sharding-rules | filecheck %s
// RUN: shardc-opt %s -sdy-populate-op-sharding-rules | filecheck %s
// RUN: shardc-opt %s -shardc-populate-op-sharding-rules='conservative-propagation=true' | filecheck %s --check-prefix=CONS

// CHECK-LABEL: func @dot_general(
// CHECK: stablehlo.dot_general{{.*}}{sdy.sharding_rule = #sdy.op_sharding_rule<([i, j, l], [i, l, k])->([i, j, k]) {i=2, j=8, k=16, l=4} reduction={l}>}
// CHECK-LABEL: func @dot(
// CHECK: stablehlo.dot{{.*}}{sdy.sharding_rule = #sdy.op_sharding_rule<([i, k], [k, j])->([i, j]) {i=8, j=16, k=4} reduction={k}>}
// CHECK: stablehlo.dot{{.*}}{sdy.sharding_rule = #sdy.op_sharding_rule<([i, j], [j])->([i]) {i=8, j=4} reduction={j}>}
// CHECK-LABEL: func @convolution(

// CONS-LABEL: func @dot_general(
// CONS: stablehlo.dot_general{{.*}}{sdy.sharding_rule = #sdy.op_sharding_rule<([i, j, l], [i, l, k])->([i, j, k]) {i=2, j=8, k=16, l=4} reduction={l}>}
// CONS-LABEL: func @dot(
// CONS: stablehlo.dot{{.*}}{sdy.sharding_rule = #sdy.op_sharding_rule<([i, k], [k, j])->([i, j]) {i=8, j=16, k=4} reduction={k}>}
// CONS: stablehlo.dot{{.*}}{sdy.sharding_rule = #sdy.op_sharding_rule<([i, j], [j])->([i]) {i=8, j=4} reduction={j}>}
// CONS-LABEL: func @convolution(

// dot_general: batch, lhs free, rhs free, then contracting (reduction) factors.
func.func @dot_general(%arg0: tensor<2x8x4xf32>, %arg1: tensor<2x4x16xf32>) -> tensor<2x8x16xf32> {
  %0 = stablehlo.dot_general %arg0, %arg1, batching_dims = [0] x [0], contracting_dims = [2] x [1] : (tensor<2x8x4xf32>, tensor<2x4x16xf32>) -> tensor<2x8x16xf32>
  return %0 : tensor<2x8x16xf32>
}

// dot: matrix x matrix and matrix x vector.
func.func @dot(%arg0: tensor<8x4xf32>, %arg1: tensor<4x16xf32>, %arg2: tensor<4xf32>) -> (tensor<8x16xf32>, tensor<8xf32>) {
  %0 = stablehlo.dot %arg0, %arg1 : (tensor<8x4xf32>, tensor<4x16xf32>) -> tensor<8x16xf32>
  %1 = stablehlo.dot %arg0, %arg2 : (tensor<8x4xf32>, tensor<4xf32>) -> tensor<8xf32>
  return %0, %1 : tensor<8x16xf32>, tensor<8xf32>
}

// Convolution: spatial dims split into window count (perm) and window size (reduction).
func.func @convolution(%arg0: tensor<2x16x16x6xf32>, %arg1: tensor<3x3x3x8xf32>, %arg2: tensor<4x8x8x3xf32>, %arg3: tensor<3x3x3x4xf32>) -> (tensor<2x14x14x8xf32>, tensor<2x6x6x4xf32>) {
  %0 = stablehlo.convolution(%arg0, %arg1) dim_numbers = [b, 0, 1, f]x[0, 1, i, o]->[b, 0, 1, f], window = {} {batch_group_count = 1 : i64, feature_group_count = 2 : i64} : (tensor<2x16x16x6xf32>, tensor<3x3x3x8xf32>) -> tensor<2x14x14x8xf32>
  %1 = stablehlo.convolution(%arg2, %arg3) dim_numbers = [b, 0, 1, f]x[0, 1, i, o]->[b, 0, 1, f], window = {} {batch_group_count = 2 : i64, feature_group_count = 1 : i64} : (tensor<4x8x8x3xf32>, tensor<3x3x3x4xf32>) -> tensor<2x6x6x4xf32>
  return %0, %1 : tensor<2x14x14x8xf32>, tensor<2x6x6x4xf32>
}
