// RUN: not shardc-opt %s 2>&1 | filecheck %s
// CHECK-NOT: Traceback
// CHECK: hostile_unterminated_string.mlir:[[# @LINE + 2]]:{{[0-9]+}}: error:
// CHECK-NOT: Traceback
module attributes {a = "never closed
