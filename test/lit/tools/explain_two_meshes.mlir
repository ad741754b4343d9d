// A value on another mesh symbol is placed on that mesh's grid: --explain failed
// with an internal KeyError on its axis name, whether the meshes have the same
// device count (legitimate) or not (an error check-shardings reports).
// RUN: shardc-opt %s --split-input-file --sdy-propagation-pipeline --explain 2>&1 | filecheck %s
// CHECK-NOT: internal error
// CHECK: %arg0  argument  {{.*}} [{"x"}, {}]  8x16   512
// CHECK: %arg1  argument  {{.*}} [{"a"}, {}]  2x16   128
sdy.mesh @mesh = <["x"=2, "y"=4]>
sdy.mesh @flat = <["a"=8]>
func.func @main(%arg0: tensor<16x16xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"x"}, {}]>}, %arg1: tensor<16x16xf32> {sdy.sharding = #sdy.sharding<@flat, [{"a"}, {}]>}) -> tensor<16x16xf32> {
  %0 = stablehlo.add %arg0, %arg0 : tensor<16x16xf32>
  return %0 : tensor<16x16xf32>
}

// -----

// CHECK: %arg0  argument  {{.*}} [{"x"}, {}]  6x16   384
// CHECK: %arg1  argument  {{.*}} [{"a"}, {}]  4x16   256
// CHECK-NOT: internal error
sdy.mesh @mesh = <["x"=2, "y"=4]>
sdy.mesh @other = <["a"=3]>
func.func @main(%arg0: tensor<12x16xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"x"}, {}]>}, %arg1: tensor<12x16xf32> {sdy.sharding = #sdy.sharding<@other, [{"a"}, {}]>}) -> tensor<12x16xf32> {
  %0 = stablehlo.add %arg0, %arg1 : tensor<12x16xf32>
  return %0 : tensor<12x16xf32>
}
