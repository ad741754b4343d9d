// RUN: not shardc-opt %s 2>&1 | filecheck %s
// CHECK-NOT: Traceback
// CHECK: hostile_bad_attribute.mlir:[[# @LINE + 2]]:{{[0-9]+}}: error:
// CHECK-NOT: Traceback
func.func @f(%arg0: tensor<8xf32> {sdy.sharding = #sdy.sharding<mesh<["x"=2]>, [{"x"}, {"x"}, {"}]>}) -> tensor<8xf32> {
  return %arg0 : tensor<8xf32>
}
