// A convolution dimension index of 2**32 makes the parser itself give up
// ("SmallVector unable to grow"): a diagnostic, never an internal error.
// RUN: not shardc-opt %s 2>&1 | filecheck %s
// CHECK-NOT: internal error
// CHECK: error: the MLIR parser could not build this input
func.func @f(%arg0: tensor<1x8x8x3xf32>, %arg1: tensor<3x3x3x16xf32>) -> tensor<1x6x6x16xf32> {
  %0 = stablehlo.convolution(%arg0, %arg1) dim_numbers = [b, 0, 1, f]x[0, 1, i, o]->[b, 4294967296, 1, f], window = {} {batch_group_count = 1 : i64, feature_group_count = 1 : i64} : (tensor<1x8x8x3xf32>, tensor<3x3x3x16xf32>) -> tensor<1x6x6x16xf32>
  return %0 : tensor<1x6x6x16xf32>
}
