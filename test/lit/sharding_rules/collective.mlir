// RUN: shardc-opt %s -shardc-populate-op-sharding-rules | filecheck %s
// RUN: shardc-opt %s -sdy-populate-op-sharding-rules | filecheck %s

// CHECK-LABEL: func @collectives(
// CHECK: stablehlo.add{{.*}}{sdy.sharding_rule = #sdy.op_sharding_rule<([], [])->([])>}
// CHECK: {sdy.sharding_rule = #sdy.op_sharding_rule<([i, j])->([i, j]) {i=8, j=4}>}
// CHECK: stablehlo.all_gather{{.*}}{sdy.sharding_rule = #sdy.op_sharding_rule<([i, j])->([i, k]) {i=8, j=4, k=8} need_replication={j, k}>}
// CHECK: stablehlo.add{{.*}}{sdy.sharding_rule = #sdy.op_sharding_rule<([], [])->([])>}
// CHECK: {sdy.sharding_rule = #sdy.op_sharding_rule<([j, i])->([k, i]) {i=4, j=8, k=4} need_replication={j, k}>}
// CHECK: stablehlo.all_to_all{{.*}}{sdy.sharding_rule = #sdy.op_sharding_rule<([k, i])->([l, j]) {i=4, j=2, k=8, l=16} need_replication={i, j, k, l}>}
// CHECK: stablehlo.collective_permute{{.*}}{sdy.sharding_rule = #sdy.op_sharding_rule<([i, j])->([i, j]) {i=8, j=4}>}

// Collectives: all_reduce/collective_permute are pointwise; gathered, scattered,
// split and concatenated dims get operand-only and result-only nr factors.
func.func @collectives(%arg0: tensor<8x4xf32>) -> (tensor<8x4xf32>, tensor<8x8xf32>, tensor<4x4xf32>, tensor<16x2xf32>, tensor<8x4xf32>) {
  %0 = "stablehlo.all_reduce"(%arg0) ({
  ^bb0(%a: tensor<f32>, %b: tensor<f32>):
    %5 = stablehlo.add %a, %b : tensor<f32>
    stablehlo.return %5 : tensor<f32>
  }) {replica_groups = dense<[[0, 1]]> : tensor<1x2xi64>} : (tensor<8x4xf32>) -> tensor<8x4xf32>
  %1 = "stablehlo.all_gather"(%arg0) {all_gather_dim = 1 : i64, replica_groups = dense<[[0, 1]]> : tensor<1x2xi64>} : (tensor<8x4xf32>) -> tensor<8x8xf32>
  %2 = "stablehlo.reduce_scatter"(%arg0) ({
  ^bb0(%a: tensor<f32>, %b: tensor<f32>):
    %5 = stablehlo.add %a, %b : tensor<f32>
    stablehlo.return %5 : tensor<f32>
  }) {scatter_dimension = 0 : i64, replica_groups = dense<[[0, 1]]> : tensor<1x2xi64>} : (tensor<8x4xf32>) -> tensor<4x4xf32>
  %3 = "stablehlo.all_to_all"(%arg0) {split_dimension = 1 : i64, concat_dimension = 0 : i64, split_count = 2 : i64, replica_groups = dense<[[0, 1]]> : tensor<1x2xi64>} : (tensor<8x4xf32>) -> tensor<16x2xf32>
  %4 = "stablehlo.collective_permute"(%arg0) {source_target_pairs = dense<[[0, 1], [1, 0]]> : tensor<2x2xi64>} : (tensor<8x4xf32>) -> tensor<8x4xf32>
  return %0, %1, %2, %3, %4 : tensor<8x4xf32>, tensor<8x8xf32>, tensor<4x4xf32>, tensor<16x2xf32>, tensor<8x4xf32>
}
