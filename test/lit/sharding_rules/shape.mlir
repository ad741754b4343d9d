// RUN: shardc-opt %s -shardc-populate-op-sharding-rules | filecheck %s
// RUN: shardc-opt %s -sdy-populate-op-sharding-rules | filecheck %s
// RUN: shardc-opt %s -shardc-populate-op-sharding-rules='conservative-propagation=true' | filecheck %s --check-prefix=CONS

// CHECK-LABEL: func @broadcast_in_dim(
// CHECK: stablehlo.broadcast_in_dim{{.*}}{sdy.sharding_rule = #sdy.op_sharding_rule<([j, l])->([i, k, l]) {i=8, j=1, k=2, l=4}>}
// CHECK-LABEL: func @reshape(
// CHECK: stablehlo.reshape{{.*}}{sdy.sharding_rule = #sdy.op_sharding_rule<([ij])->([i, j]) {i=2, j=4}>}
// CHECK: stablehlo.reshape{{.*}}{sdy.sharding_rule = #sdy.op_sharding_rule<([ij, k])->([i, jk]) {i=2, j=4, k=4}>}
// CHECK: stablehlo.reshape{{.*}}{sdy.sharding_rule = #sdy.op_sharding_rule<([i, j])->([ij]) {i=6, j=4}>}
// CHECK: stablehlo.reshape{{.*}}{sdy.sharding_rule = #sdy.op_sharding_rule<([i, lm])->([j, km]) {i=4, j=3, k=4, l=3, m=2}>}
// CHECK: stablehlo.reshape{{.*}}{sdy.sharding_rule = #sdy.op_sharding_rule<([i, jk, l])->([j, k]) {i=1, j=2, k=3, l=1}>}
// CHECK-LABEL: func @transpose_reverse(
// CHECK: stablehlo.transpose{{.*}}{sdy.sharding_rule = #sdy.op_sharding_rule<([j, k, i])->([i, j, k]) {i=8, j=2, k=4}>}
// CHECK: stablehlo.reverse{{.*}}{sdy.sharding_rule = #sdy.op_sharding_rule<([i, j, k])->([i, j, k]) {i=2, j=4, k=8} permutation={j}>}
// CHECK-LABEL: func @concatenate(
// CHECK: stablehlo.concatenate{{.*}}{sdy.sharding_rule = #sdy.op_sharding_rule<([i, j], [i, j])->([i, j]) {i=8, j=6} need_replication={j}>}
// CHECK: stablehlo.slice{{.*}}{sdy.sharding_rule = #sdy.op_sharding_rule<([i, j])->([i, j]) {i=8, j=4} permutation={j}>}
// CHECK: stablehlo.slice{{.*}}{sdy.sharding_rule = #sdy.op_sharding_rule<([i, j])->([i, j]) {i=8, j=4} permutation={j}>}
// CHECK: stablehlo.concatenate{{.*}}{sdy.sharding_rule = #sdy.op_sharding_rule<([i, j], [i, j])->([i, j]) {i=8, j=4} permutation={j}>}
// CHECK-LABEL: func @pad_slice(
// CHECK: stablehlo.pad{{.*}}{sdy.sharding_rule = #sdy.op_sharding_rule<([i, j], [])->([i, j]) {i=8, j=4} permutation={j}>}
// CHECK: stablehlo.slice{{.*}}{sdy.sharding_rule = #sdy.op_sharding_rule<([i, j])->([i, j]) {i=8, j=4} permutation={i}>}
// CHECK-LABEL: func @no_rule(
// CHECK: stablehlo.iota dim = 0 : tensor<4xf32>{{$}}
// CHECK: stablehlo.constant dense<1.000000e+00> : tensor<4xf32>{{$}}

// CONS-LABEL: func @broadcast_in_dim(
// CONS: stablehlo.broadcast_in_dim{{.*}}{sdy.sharding_rule = #sdy.op_sharding_rule<([j, l])->([i, k, l]) {i=8, j=1, k=2, l=4}>}
// CONS-LABEL: func @reshape(
// CONS: stablehlo.reshape{{.*}}{sdy.sharding_rule = #sdy.op_sharding_rule<([ij])->([i, j]) {i=2, j=4}>}
// CONS: stablehlo.reshape{{.*}}{sdy.sharding_rule = #sdy.op_sharding_rule<([ij, k])->([i, jk]) {i=2, j=4, k=4}>}
// CONS: stablehlo.reshape{{.*}}{sdy.sharding_rule = #sdy.op_sharding_rule<([i, j])->([ij]) {i=6, j=4}>}
// CONS: stablehlo.reshape{{.*}}{sdy.sharding_rule = #sdy.op_sharding_rule<([i, lm])->([j, km]) {i=4, j=3, k=4, l=3, m=2}>}
// CONS: stablehlo.reshape{{.*}}{sdy.sharding_rule = #sdy.op_sharding_rule<([i, jk, l])->([j, k]) {i=1, j=2, k=3, l=1}>}
// CONS-LABEL: func @transpose_reverse(
// CONS: stablehlo.transpose{{.*}}{sdy.sharding_rule = #sdy.op_sharding_rule<([j, k, i])->([i, j, k]) {i=8, j=2, k=4}>}
// CONS: stablehlo.reverse{{.*}}{sdy.sharding_rule = #sdy.op_sharding_rule<([i, j, k])->([i, j, k]) {i=2, j=4, k=8} permutation={j}>}
// CONS-LABEL: func @concatenate(
// CONS: stablehlo.concatenate{{.*}}{sdy.sharding_rule = #sdy.op_sharding_rule<([i, j], [i, k])->([i, l]) {i=8, j=1, k=1, l=1}>}
// CONS: stablehlo.slice{{.*}}{sdy.sharding_rule = #sdy.op_sharding_rule<([i, j])->([i, j]) {i=8, j=4} permutation={j} blocked_propagation={j}>}
// CONS: stablehlo.slice{{.*}}{sdy.sharding_rule = #sdy.op_sharding_rule<([i, j])->([i, j]) {i=8, j=4} permutation={j} blocked_propagation={j}>}
// CONS: stablehlo.concatenate{{.*}}{sdy.sharding_rule = #sdy.op_sharding_rule<([i, j], [i, k])->([i, l]) {i=8, j=1, k=1, l=1}>}
// CONS-LABEL: func @pad_slice(
// CONS: stablehlo.pad{{.*}}{sdy.sharding_rule = #sdy.op_sharding_rule<([i, j], [])->([i, j]) {i=8, j=4} permutation={j} blocked_propagation={j}>}
// CONS: stablehlo.slice{{.*}}{sdy.sharding_rule = #sdy.op_sharding_rule<([i, j])->([i, j]) {i=8, j=4} permutation={i} blocked_propagation={i}>}
// CONS-LABEL: func @no_rule(
// CONS: stablehlo.iota dim = 0 : tensor<4xf32>{{$}}
// CONS: stablehlo.constant dense<1.000000e+00> : tensor<4xf32>{{$}}

// Broadcast: an expanded size-1 dim gets its own factor; new dims are result-only.
func.func @broadcast_in_dim(%arg0: tensor<1x4xf32>) -> tensor<8x2x4xf32> {
  %0 = stablehlo.broadcast_in_dim %arg0, dims = [1, 2] : (tensor<1x4xf32>) -> tensor<8x2x4xf32>
  return %0 : tensor<8x2x4xf32>
}

// Reshape: splits, merges, partial overlaps and size-1 dims.
func.func @reshape(%arg0: tensor<8xf32>, %arg1: tensor<8x4xf32>, %arg2: tensor<6x4xf32>, %arg3: tensor<4x6xf32>, %arg4: tensor<1x6x1xf32>) -> (tensor<2x4xf32>, tensor<2x16xf32>, tensor<24xf32>, tensor<3x8xf32>, tensor<2x3xf32>) {
  %0 = stablehlo.reshape %arg0 : (tensor<8xf32>) -> tensor<2x4xf32>
  %1 = stablehlo.reshape %arg1 : (tensor<8x4xf32>) -> tensor<2x16xf32>
  %2 = stablehlo.reshape %arg2 : (tensor<6x4xf32>) -> tensor<24xf32>
  %3 = stablehlo.reshape %arg3 : (tensor<4x6xf32>) -> tensor<3x8xf32>
  %4 = stablehlo.reshape %arg4 : (tensor<1x6x1xf32>) -> tensor<2x3xf32>
  return %0, %1, %2, %3, %4 : tensor<2x4xf32>, tensor<2x16xf32>, tensor<24xf32>, tensor<3x8xf32>, tensor<2x3xf32>
}

// Transpose and reverse (reversed dims are permutation factors).
func.func @transpose_reverse(%arg0: tensor<2x4x8xf32>) -> (tensor<8x2x4xf32>, tensor<2x4x8xf32>) {
  %0 = stablehlo.transpose %arg0, dims = [2, 0, 1] : (tensor<2x4x8xf32>) -> tensor<8x2x4xf32>
  %1 = stablehlo.reverse %arg0, dims = [1] : tensor<2x4x8xf32>
  return %0, %1 : tensor<8x2x4xf32>, tensor<2x4x8xf32>
}

// Concatenate: nr on the concat dim, perm when the operands are slices of one tensor.
func.func @concatenate(%arg0: tensor<8x4xf32>, %arg1: tensor<8x2xf32>) -> (tensor<8x6xf32>, tensor<8x4xf32>) {
  %0 = stablehlo.concatenate %arg0, %arg1, dim = 1 : (tensor<8x4xf32>, tensor<8x2xf32>) -> tensor<8x6xf32>
  %1 = stablehlo.slice %arg0 [0:8, 0:2] : (tensor<8x4xf32>) -> tensor<8x2xf32>
  %2 = stablehlo.slice %arg0 [0:8, 2:4] : (tensor<8x4xf32>) -> tensor<8x2xf32>
  %3 = stablehlo.concatenate %2, %1, dim = 1 : (tensor<8x2xf32>, tensor<8x2xf32>) -> tensor<8x4xf32>
  return %0, %3 : tensor<8x6xf32>, tensor<8x4xf32>
}

// Pad and slice: resized dims are permutation factors of the operand size.
func.func @pad_slice(%arg0: tensor<8x4xf32>, %arg1: tensor<f32>) -> (tensor<8x7xf32>, tensor<4x4xf32>) {
  %0 = stablehlo.pad %arg0, %arg1, low = [0, 1], high = [0, 2], interior = [0, 0] : (tensor<8x4xf32>, tensor<f32>) -> tensor<8x7xf32>
  %1 = stablehlo.slice %arg0 [0:8:2, 0:4] : (tensor<8x4xf32>) -> tensor<4x4xf32>
  return %0, %1 : tensor<8x7xf32>, tensor<4x4xf32>
}

// No rule on purpose: iota and constants.
func.func @no_rule() -> (tensor<4xf32>, tensor<4xf32>) {
  %0 = stablehlo.iota dim = 0 : tensor<4xf32>
  %1 = stablehlo.constant dense<1.000000e+00> : tensor<4xf32>
  return %0, %1 : tensor<4xf32>, tensor<4xf32>
}
