// RUN: shardc-opt %s -split-input-file -shardc-fold-identities | filecheck %s

// Identity shape ops take their operand, as when XLA converts the module to HLO.
sdy.mesh @mesh = <["x"=2, "y"=4]>

// CHECK-LABEL: func @identities
// CHECK-NOT: stablehlo.slice
// CHECK-NOT: stablehlo.pad
// CHECK-NOT: stablehlo.reshape
// CHECK-NOT: stablehlo.convert
// CHECK-NOT: stablehlo.transpose
// CHECK-NOT: stablehlo.broadcast_in_dim
// CHECK-NOT: stablehlo.reverse
// CHECK-NOT: stablehlo.concatenate
// CHECK: %[[T:.*]] = stablehlo.tanh %arg0
// CHECK: return %arg0, %[[T]]
func.func @identities(%arg0: tensor<2x4xf32> {sdy.sharding = #sdy.sharding<@mesh, [{}, {}]>}) -> (tensor<2x4xf32>, tensor<2x4xf32>) {
  %0 = stablehlo.slice %arg0 [0:2, 0:4] : (tensor<2x4xf32>) -> tensor<2x4xf32>
  %c = stablehlo.constant dense<0.000000e+00> : tensor<f32>
  %1 = stablehlo.pad %0, %c, low = [0, 0], high = [0, 0], interior = [0, 0] : (tensor<2x4xf32>, tensor<f32>) -> tensor<2x4xf32>
  %2 = stablehlo.reshape %1 : (tensor<2x4xf32>) -> tensor<2x4xf32>
  %3 = stablehlo.convert %2 : tensor<2x4xf32>
  %4 = stablehlo.transpose %3, dims = [0, 1] : (tensor<2x4xf32>) -> tensor<2x4xf32>
  %5 = stablehlo.broadcast_in_dim %4, dims = [0, 1] : (tensor<2x4xf32>) -> tensor<2x4xf32>
  %6 = stablehlo.reverse %5, dims = [] : tensor<2x4xf32>
  %7 = stablehlo.concatenate %6, dim = 0 : (tensor<2x4xf32>) -> tensor<2x4xf32>
  %8 = stablehlo.tanh %7 : tensor<2x4xf32>
  return %0, %8 : tensor<2x4xf32>, tensor<2x4xf32>
}

// -----

// Ops that change something, and an identity carrying its own sharding, stay.
sdy.mesh @mesh = <["x"=2, "y"=4]>

// CHECK-LABEL: func @kept
// CHECK: stablehlo.slice %arg0 [0:1, 0:4]
// CHECK: stablehlo.pad
// CHECK-SAME: high = [1, 0]
// CHECK: stablehlo.transpose %arg0, dims = [1, 0]
// CHECK: stablehlo.reshape %arg0 {sdy.sharding
// CHECK: stablehlo.slice %arg0 [0:2:2, 0:4]
func.func @kept(%arg0: tensor<2x4xf32>) -> (tensor<1x4xf32>, tensor<3x4xf32>, tensor<4x2xf32>, tensor<2x4xf32>, tensor<1x4xf32>) {
  %0 = stablehlo.slice %arg0 [0:1, 0:4] : (tensor<2x4xf32>) -> tensor<1x4xf32>
  %c = stablehlo.constant dense<0.000000e+00> : tensor<f32>
  %1 = stablehlo.pad %arg0, %c, low = [0, 0], high = [1, 0], interior = [0, 0] : (tensor<2x4xf32>, tensor<f32>) -> tensor<3x4xf32>
  %2 = stablehlo.transpose %arg0, dims = [1, 0] : (tensor<2x4xf32>) -> tensor<4x2xf32>
  %3 = stablehlo.reshape %arg0 {sdy.sharding = #sdy.sharding_per_value<[<@mesh, [{"x"}, {}]>]>} : (tensor<2x4xf32>) -> tensor<2x4xf32>
  %4 = stablehlo.slice %arg0 [0:2:2, 0:4] : (tensor<2x4xf32>) -> tensor<1x4xf32>
  return %0, %1, %2, %3, %4 : tensor<1x4xf32>, tensor<3x4xf32>, tensor<4x2xf32>, tensor<2x4xf32>, tensor<1x4xf32>
}

// -----

// A broadcast_in_dim that only inserts unit dimensions is the reshape XLA's import
// writes; one that repeats elements or reorders dimensions is a broadcast.
sdy.mesh @mesh = <["x"=2, "y"=4]>

// CHECK-LABEL: func @reshaping_broadcasts
// CHECK-NEXT: %[[R0:.*]] = stablehlo.reshape %arg0 : (tensor<2x4xf32>) -> tensor<1x2x4xf32>
// CHECK-NEXT: %[[R1:.*]] = stablehlo.reshape %arg0 : (tensor<2x4xf32>) -> tensor<2x1x4x1xf32>
// CHECK-NEXT: stablehlo.broadcast_in_dim %arg0, dims = [1, 2] : (tensor<2x4xf32>) -> tensor<3x2x4xf32>
// CHECK-NEXT: stablehlo.broadcast_in_dim %arg0, dims = [1, 0]
// CHECK-NEXT: stablehlo.broadcast_in_dim %arg1, dims = []
// CHECK-NEXT: stablehlo.broadcast_in_dim %arg0, dims = [1, 2] {sdy.sharding
func.func @reshaping_broadcasts(%arg0: tensor<2x4xf32>, %arg1: tensor<f32>) -> (tensor<1x2x4xf32>, tensor<2x1x4x1xf32>, tensor<3x2x4xf32>, tensor<4x2xf32>, tensor<1xf32>, tensor<1x2x4xf32>) {
  %0 = stablehlo.broadcast_in_dim %arg0, dims = [1, 2] : (tensor<2x4xf32>) -> tensor<1x2x4xf32>
  %1 = stablehlo.broadcast_in_dim %arg0, dims = [0, 2] : (tensor<2x4xf32>) -> tensor<2x1x4x1xf32>
  %2 = stablehlo.broadcast_in_dim %arg0, dims = [1, 2] : (tensor<2x4xf32>) -> tensor<3x2x4xf32>
  %3 = stablehlo.broadcast_in_dim %arg0, dims = [1, 0] : (tensor<2x4xf32>) -> tensor<4x2xf32>
  %4 = stablehlo.broadcast_in_dim %arg1, dims = [] : (tensor<f32>) -> tensor<1xf32>
  %5 = stablehlo.broadcast_in_dim %arg0, dims = [1, 2] {sdy.sharding = #sdy.sharding_per_value<[<@mesh, [{}, {"x"}, {}]>]>} : (tensor<2x4xf32>) -> tensor<1x2x4xf32>
  return %0, %1, %2, %3, %4, %5 : tensor<1x2x4xf32>, tensor<2x1x4x1xf32>, tensor<3x2x4xf32>, tensor<4x2xf32>, tensor<1xf32>, tensor<1x2x4xf32>
}
