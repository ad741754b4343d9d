// RUN: shardc-opt %s -shardc-populate-op-sharding-rules | filecheck %s
// RUN: shardc-opt %s -sdy-populate-op-sharding-rules | filecheck %s

// CHECK-LABEL: func @custom_calls(
// CHECK: stablehlo.custom_call{{.*}}{sdy.sharding_rule = #sdy.op_sharding_rule<([i, j, k])->([i, j, k]) {i=2, j=4, k=4}>}
// CHECK: stablehlo.custom_call{{.*}}{sdy.sharding_rule = #sdy.op_sharding_rule<([i, j, k])->([i, j, k], [i, k]) {i=2, j=4, k=4}>}
// CHECK: stablehlo.custom_call{{.*}}{sdy.sharding_rule = #sdy.op_sharding_rule<([i, j, k])->([i, j, k], [i, l]) {i=2, j=4, k=4, l=4} need_replication={j, k, l}>}
// CHECK: stablehlo.custom_call{{.*}}{sdy.sharding_rule = #sdy.op_sharding_rule<([i, j])->([i, j], [i, j]) {i=8, j=16} need_replication={j} blocked_propagation={j}>}
// CHECK: stablehlo.custom_call @tpu_custom_call(%arg1) : (tensor<8x16xf32>) -> tensor<8x16xf32>{{$}}

// Custom calls by target: pointwise, Eigh, Qr, top-k; opaque targets get no rule.
func.func @custom_calls(%arg0: tensor<2x4x4xf32>, %arg1: tensor<8x16xf32>) -> (tensor<2x4x4xf32>, tensor<2x4x4xf32>, tensor<2x4xf32>, tensor<2x4x4xf32>, tensor<2x4xf32>, tensor<8x4xf32>, tensor<8x4xi32>, tensor<8x16xf32>) {
  %0 = stablehlo.custom_call @MoveToHost(%arg0) : (tensor<2x4x4xf32>) -> tensor<2x4x4xf32>
  %1:2 = stablehlo.custom_call @Eigh(%arg0) : (tensor<2x4x4xf32>) -> (tensor<2x4x4xf32>, tensor<2x4xf32>)
  %2:2 = stablehlo.custom_call @Qr(%arg0) : (tensor<2x4x4xf32>) -> (tensor<2x4x4xf32>, tensor<2x4xf32>)
  %3:2 = stablehlo.custom_call @mhlo.topk(%arg1) : (tensor<8x16xf32>) -> (tensor<8x4xf32>, tensor<8x4xi32>)
  %4 = stablehlo.custom_call @tpu_custom_call(%arg1) : (tensor<8x16xf32>) -> tensor<8x16xf32>
  return %0, %1#0, %1#1, %2#0, %2#1, %3#0, %3#1, %4 : tensor<2x4x4xf32>, tensor<2x4x4xf32>, tensor<2x4xf32>, tensor<2x4x4xf32>, tensor<2x4xf32>, tensor<8x4xf32>, tensor<8x4xi32>, tensor<8x16xf32>
}
