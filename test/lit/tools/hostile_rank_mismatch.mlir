// RUN: not shardc-opt %s --shardc-drop-shardings 2>&1 | filecheck %s
// CHECK-NOT: Traceback
// CHECK: hostile_rank_mismatch.mlir:[[# @LINE + 3]]:1: error: {{.*}}sharding doesn't match tensor rank
// CHECK-NOT: Traceback
sdy.mesh @m = <["x"=2]>
func.func @f(%arg0: tensor<8xf32> {sdy.sharding = #sdy.sharding<@m, [{"x"}, {}, {}]>}) -> tensor<8xf32> {
  return %arg0 : tensor<8xf32>
}
