// RUN: shardc-opt %s --split-input-file --shardc-populate-op-sharding-rules --verify-diagnostics | filecheck %s
// RUN: shardc-opt %s --split-input-file --sdy-populate-op-sharding-rules --verify-diagnostics | filecheck %s
// RUN: shardc-opt %s --split-input-file --shardc-populate-op-sharding-rules='conservative-propagation=true' --verify-diagnostics | filecheck %s --check-prefix=CONS

// A rule already on the op is kept as is; others get the registry's rule.
// CHECK-LABEL: func @keeps_attached_rule(
// CHECK:      stablehlo.negate %arg0 {sdy.sharding_rule = #sdy.op_sharding_rule<([i, j])->([i, j]) {i=8, j=4}, custom>}
// CHECK-NEXT: stablehlo.negate %0 {sdy.sharding_rule = #sdy.op_sharding_rule<([i, j])->([i, j]) {i=8, j=4}>}
func.func @keeps_attached_rule(%arg0: tensor<8x4xf32>) -> tensor<8x4xf32> {
  %0 = stablehlo.negate %arg0 {sdy.sharding_rule = #sdy.op_sharding_rule<([i, j])->([i, j]) {i=8, j=4}, custom>} : tensor<8x4xf32>
  %1 = stablehlo.negate %0 : tensor<8x4xf32>
  return %1 : tensor<8x4xf32>
}

// -----

// The conservative option changes the slice rule (blocked permutation).
// CHECK-LABEL: func @conservative_slice(
// CHECK: {sdy.sharding_rule = #sdy.op_sharding_rule<([i, j])->([i, j]) {i=8, j=4} permutation={i}>}
// CONS-LABEL: func @conservative_slice(
// CONS: {sdy.sharding_rule = #sdy.op_sharding_rule<([i, j])->([i, j]) {i=8, j=4} permutation={i} blocked_propagation={i}>}
func.func @conservative_slice(%arg0: tensor<8x4xf32>) -> tensor<4x4xf32> {
  %0 = stablehlo.slice %arg0 [0:8:2, 0:4] : (tensor<8x4xf32>) -> tensor<4x4xf32>
  return %0 : tensor<4x4xf32>
}

// -----

// Ops unknown to the registry are left alone, with a warning.
// CHECK-LABEL: func @unknown_op(
// CHECK: chlo.broadcast_add %arg0, %arg0 : (tensor<8xf32>, tensor<8xf32>) -> tensor<8xf32>{{$}}
func.func @unknown_op(%arg0: tensor<8xf32>) -> tensor<8xf32> {
  // expected-warning @+1 {{op 'chlo.broadcast_add' has no sharding rule in shardc: shardc propagates no sharding through it}}
  %0 = chlo.broadcast_add %arg0, %arg0 : (tensor<8xf32>, tensor<8xf32>) -> tensor<8xf32>
  return %0 : tensor<8xf32>
}
