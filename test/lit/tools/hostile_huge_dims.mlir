// RUN: not shardc-opt %s 2>&1 | filecheck %s
// CHECK-NOT: Traceback
// CHECK: hostile_huge_dims.mlir:[[# @LINE + 2]]:{{[0-9]+}}: error:
// CHECK-NOT: Traceback
func.func @f(%arg0: tensor<999999999999999999999999999x8xf32>) -> tensor<8xf32> {
  return %arg0 : tensor<8xf32>
}
