// RUN: shardc-opt %s --explain | filecheck %s

// The explain table follows the module as // comments: one row per value,
// the axis origin, and the all-reduce the sharded contraction needs.
sdy.mesh @m = <["x"=2, "y"=4]>
func.func @main(%arg0: tensor<16x32xf32> {sdy.sharding = #sdy.sharding<@m, [{"x"}, {"y"}]>}, %arg1: tensor<32x8xf32> {sdy.sharding = #sdy.sharding<@m, [{"y"}, {}]>}) -> tensor<16x8xf32> {
  %0 = stablehlo.dot_general %arg0, %arg1, contracting_dims = [1] x [0] : (tensor<16x32xf32>, tensor<32x8xf32>) -> tensor<16x8xf32>
  %1 = stablehlo.tanh %0 : tensor<16x8xf32>
  return %1 : tensor<16x8xf32>
}
// CHECK: // value  op
// CHECK-NEXT: // %arg0  argument {{.*}} 16x32  f32    [{"x"}, {"y"}]   8x8    256        x<-arg 0 {{.*}}; y<-arg 0
// CHECK-NEXT: // %arg1  argument {{.*}} [{"y"}, {}]
// CHECK-NEXT: // %0     stablehlo.dot_general {{.*}}:7 {{.*}}[{"x"}, {}]     8x8    256        x<-arg 0 {{.*}}all-reduce 256B @ {{.*}}:7
// CHECK-NEXT: // %1     stablehlo.tanh
// CHECK-NEXT: // 4 values
