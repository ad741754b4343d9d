// RUN: %python -c "import sys; sys.stdout.buffer.write(b'func.func @f() {\n  return\n}\n\x00\x00garbage\n')" > %t.mlir
// RUN: not shardc-opt %t.mlir 2>&1 | filecheck %s
// CHECK-NOT: Traceback
// CHECK: .mlir:4:{{[0-9]+}}: error:
// CHECK-NOT: Traceback
