// RUN: shardc-opt %s --split-input-file --explain | filecheck %s
// RUN: shardc-opt --split-input-file --explain < %s | filecheck %s --check-prefix=STDIN

// The explain table names the input file, not the parser's "-" buffer, at
// lines of the file (not of the split chunk); a location that names its own
// file (as JAX's do) is kept.

sdy.mesh @m = <["x"=2, "y"=4]>
func.func @main(%arg0: tensor<16x32xf32> {sdy.sharding = #sdy.sharding<@m, [{"x"}, {"y"}]>}, %arg1: tensor<32x8xf32> {sdy.sharding = #sdy.sharding<@m, [{"y"}, {}]>}) -> tensor<16x8xf32> {
  %0 = stablehlo.dot_general %arg0, %arg1, contracting_dims = [1] x [0] : (tensor<16x32xf32>, tensor<32x8xf32>) -> tensor<16x8xf32> loc("train.py":10:3)
  %1 = stablehlo.tanh %0 : tensor<16x8xf32>
  return %1 : tensor<16x8xf32>
}
// CHECK-NOT: {{ -:[0-9]}}
// CHECK: // %arg0  argument {{ *}}{{.*}}explain_locations.mlir:9 {{.*}} x<-arg 0 @ explain_locations.mlir:9; y<-arg 0 @ explain_locations.mlir:9
// CHECK: // %0 {{.*}} train.py:10 {{.*}} all-reduce 256B @ train.py:10
// CHECK: // %1 {{.*}} {{.*}}explain_locations.mlir:11 {{.*}} x<-arg 0 @ explain_locations.mlir:9
// STDIN: // %arg0  argument {{ *}}<stdin>:9 {{.*}} x<-arg 0 @ <stdin>:9

// -----

sdy.mesh @m = <["x"=2, "y"=4]>
func.func @main(%arg0: tensor<16x32xf32> {sdy.sharding = #sdy.sharding<@m, [{"x"}, {"y"}]>}, %arg1: tensor<32x8xf32> {sdy.sharding = #sdy.sharding<@m, [{"y"}, {}]>}) -> tensor<16x8xf32> {
  %0 = stablehlo.dot_general %arg0, %arg1, contracting_dims = [1] x [0] : (tensor<16x32xf32>, tensor<32x8xf32>) -> tensor<16x8xf32>
  return %0 : tensor<16x8xf32>
}
// CHECK-NOT: {{ -:[0-9]}}
// CHECK: // %0 {{.*}} {{.*}}explain_locations.mlir:24 {{.*}} x<-arg 0 @ explain_locations.mlir:23 {{.*}} all-reduce 256B @ explain_locations.mlir:24
// CHECK-NOT: {{ -:[0-9]}}
// STDIN: // %0 {{.*}} <stdin>:24 {{.*}} all-reduce 256B @ <stdin>:24
