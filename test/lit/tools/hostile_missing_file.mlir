// RUN: not shardc-opt %t.does-not-exist.mlir 2>&1 | filecheck %s
// RUN: not shardc-opt %S 2>&1 | filecheck %s
// CHECK-NOT: Traceback
// CHECK: shardc-opt: error: could not open input file
// CHECK-NOT: Traceback
