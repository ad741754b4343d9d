// RUN: not shardc-opt %s 2>&1 | filecheck %s
// CHECK-NOT: Traceback
// CHECK: hostile_wrong_dialect.mlir:[[# @LINE + 3]]:{{[0-9]+}}: error: operation being parsed with an unregistered dialect
// CHECK-NOT: Traceback
func.func @f() {
  "frob.op"() : () -> ()
  return
}
