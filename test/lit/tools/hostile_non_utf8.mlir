// RUN: %python -c "import sys; sys.stdout.buffer.write(b'func.func @f() {\n  \xff\xfe\xc3\x28 = 1\n}\n')" > %t.mlir
// RUN: not shardc-opt %t.mlir 2>&1 | filecheck %s
// CHECK-NOT: Traceback
// CHECK: .mlir:2:3: error:
// CHECK-NOT: Traceback
