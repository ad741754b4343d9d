// RUN: shardc-opt %s -shardc-populate-op-sharding-rules | filecheck %s
// RUN: shardc-opt %s -sdy-populate-op-sharding-rules | filecheck %s

// CHECK-LABEL: func @linalg(
// CHECK: stablehlo.cholesky{{.*}}{sdy.sharding_rule = #sdy.op_sharding_rule<([i, j, k])->([i, j, k]) {i=2, j=4, k=4} need_replication={j, k}>}
// CHECK: stablehlo.triangular_solve{{.*}}{sdy.sharding_rule = #sdy.op_sharding_rule<([i, l, j], [i, j, k])->([i, l, k]) {i=2, j=4, k=3, l=4} need_replication={j, k, l}>}
// CHECK-LABEL: func @fft(
// CHECK: stablehlo.fft{{.*}}{sdy.sharding_rule = #sdy.op_sharding_rule<([i, j])->([i, j]) {i=2, j=8} need_replication={j}>}
// CHECK: stablehlo.fft{{.*}}{sdy.sharding_rule = #sdy.op_sharding_rule<([i, j])->([i, j]) {i=2, j=8} need_replication={j} blocked_propagation={j}>}
// CHECK-LABEL: func @rng(
// CHECK: {sdy.sharding_rule = #sdy.op_sharding_rule<([i])->([i], [j, k]) {i=2, j=4, k=8} need_replication={i} blocked_propagation={i}>}
// CHECK-LABEL: func @batch_norm(
// CHECK: stablehlo.batch_norm_inference{{.*}}{sdy.sharding_rule = #sdy.op_sharding_rule<([i, j], [j], [j], [j], [j])->([i, j]) {i=8, j=4}>}

// cholesky and triangular_solve: batch dims pass through, matrix dims need replication.
func.func @linalg(%arg0: tensor<2x4x4xf32>, %arg1: tensor<2x4x3xf32>) -> (tensor<2x4x4xf32>, tensor<2x4x3xf32>) {
  %0 = stablehlo.cholesky %arg0, lower = true : tensor<2x4x4xf32>
  %1 = "stablehlo.triangular_solve"(%arg0, %arg1) {left_side = true, lower = true, unit_diagonal = false, transpose_a = #stablehlo<transpose TRANSPOSE>} : (tensor<2x4x4xf32>, tensor<2x4x3xf32>) -> tensor<2x4x3xf32>
  return %0, %1 : tensor<2x4x4xf32>, tensor<2x4x3xf32>
}

// fft: fft dims need replication; rfft's truncated last dim is also blocked.
func.func @fft(%arg0: tensor<2x8xcomplex<f32>>, %arg1: tensor<2x8xf32>) -> (tensor<2x8xcomplex<f32>>, tensor<2x5xcomplex<f32>>) {
  %0 = stablehlo.fft %arg0, type = FFT, length = [8] : (tensor<2x8xcomplex<f32>>) -> tensor<2x8xcomplex<f32>>
  %1 = stablehlo.fft %arg1, type = RFFT, length = [8] : (tensor<2x8xf32>) -> tensor<2x5xcomplex<f32>>
  return %0, %1 : tensor<2x8xcomplex<f32>>, tensor<2x5xcomplex<f32>>
}

// rng_bit_generator: the state is nr and blocked; the output dims are free.
func.func @rng(%arg0: tensor<2xui64>) -> (tensor<2xui64>, tensor<4x8xui32>) {
  %0:2 = stablehlo.rng_bit_generator %arg0, algorithm = DEFAULT : (tensor<2xui64>) -> (tensor<2xui64>, tensor<4x8xui32>)
  return %0#0, %0#1 : tensor<2xui64>, tensor<4x8xui32>
}

// batch_norm_inference: the feature factor is shared with the statistics.
func.func @batch_norm(%arg0: tensor<8x4xf32>, %arg1: tensor<4xf32>) -> tensor<8x4xf32> {
  %0 = "stablehlo.batch_norm_inference"(%arg0, %arg1, %arg1, %arg1, %arg1) {epsilon = 1.0e-3 : f32, feature_index = 1 : i64} : (tensor<8x4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>) -> tensor<8x4xf32>
  return %0 : tensor<8x4xf32>
}
