// RUN: not shardc-opt %s --shardc-lift-inlined-meshes 2>&1 | filecheck %s
// CHECK-NOT: Traceback
// CHECK: hostile_unknown_mesh.mlir:[[# @LINE + 3]]:8: error: {{.*}}unknown mesh: @missing
// CHECK-NOT: Traceback
func.func @f(%arg0: tensor<8xf32>) -> tensor<8xf32> {
  %0 = sdy.sharding_constraint %arg0 <@missing, [{}]> : tensor<8xf32>
  return %0 : tensor<8xf32>
}
