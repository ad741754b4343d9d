// CHLO elementwise ops get the pointwise rule of their StableHLO decomposition
// (Shardy's registry has none; XLA decomposes CHLO before its propagation).
// RUN: shardc-opt %s -shardc-populate-op-sharding-rules | filecheck %s
// RUN: shardc-opt %s -shardc-basic-propagate | filecheck %s --check-prefix=PROP

sdy.mesh @mesh = <["a"=2]>

// CHECK-LABEL: func @main
// PROP-LABEL: func @main
func.func @main(%arg0: tensor<8x4xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"a"}, {}]>}, %arg1: tensor<8x4xf32>) -> tensor<8x4xf32> {
  // CHECK: chlo.square %arg0 {sdy.sharding_rule = #sdy.op_sharding_rule<([i, j])->([i, j]) {i=8, j=4}>}
  // PROP: chlo.square %arg0 {sdy.sharding = #sdy.sharding_per_value<[<@mesh, [{"a", ?}, {?}]>]>}
  %0 = chlo.square %arg0 : tensor<8x4xf32> -> tensor<8x4xf32>
  // CHECK: chlo.erf %0 {sdy.sharding_rule = #sdy.op_sharding_rule<([i, j])->([i, j]) {i=8, j=4}>}
  // PROP: chlo.erf %0 {sdy.sharding = #sdy.sharding_per_value<[<@mesh, [{"a", ?}, {?}]>]>}
  %1 = chlo.erf %0 : tensor<8x4xf32> -> tensor<8x4xf32>
  // CHECK: chlo.next_after %1, %arg1 {sdy.sharding_rule = #sdy.op_sharding_rule<([i, j], [i, j])->([i, j]) {i=8, j=4}>}
  %2 = chlo.next_after %1, %arg1 : tensor<8x4xf32>, tensor<8x4xf32> -> tensor<8x4xf32>
  return %2 : tensor<8x4xf32>
}

// top_k: batch dims pass through; the sorted dim and the k results need
// replication (XLA decomposes it into a sort and a slice).
// CHECK-LABEL: func @top_k
// PROP-LABEL: func @top_k
func.func @top_k(%arg0: tensor<8x16xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"a"}, {}]>}) -> (tensor<8x2xf32>, tensor<8x2xi32>) {
  // CHECK: chlo.top_k(%arg0, k = 2) {sdy.sharding_rule = #sdy.op_sharding_rule<([i, j])->([i, k], [i, k]) {i=8, j=16, k=2} need_replication={j, k}>}
  // PROP: chlo.top_k(%arg0, k = 2) {sdy.sharding = #sdy.sharding_per_value<[<@mesh, [{"a", ?}, {?}]>, <@mesh, [{"a", ?}, {?}]>]>}
  %0:2 = chlo.top_k(%arg0, k = 2) : tensor<8x16xf32> -> (tensor<8x2xf32>, tensor<8x2xi32>)
  return %0#0, %0#1 : tensor<8x2xf32>, tensor<8x2xi32>
}
