// RUN: not shardc-opt %s 2>&1 | filecheck %s
// CHECK-NOT: Traceback
// CHECK: hostile_huge_dense.mlir:[[# @LINE + 3]]:{{[0-9]+}}: error:
// CHECK-NOT: Traceback
func.func @f() -> tensor<4xi8> {
  %0 = stablehlo.constant dense<[1, 2, 3, 99999999999999999999999999999]> : tensor<4xi8>
  return %0 : tensor<4xi8>
}
