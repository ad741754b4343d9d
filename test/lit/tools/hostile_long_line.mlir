// RUN: %python -c "print('func.func @' + 'a' * 1000000 + '() {\n  return %x\n}')" > %t.mlir
// RUN: not shardc-opt %t.mlir 2>&1 | filecheck %s
// CHECK-NOT: Traceback
// CHECK: .mlir:2:12: error: expected ':'
// CHECK-NOT: Traceback
