// RUN: %python -c "import sys; sys.stdout.buffer.write(b'func.func @f() {\n  \xff\xfe\xc3\x28 = 1\n}\n')" > %t.mlir
// RUN: not shardc-opt %t.mlir 2>&1 | filecheck %s
// CHECK-NOT: Traceback
// CHECK: .mlir:2:3: error:
// The offending line is not echoed: its bytes are not text.
// CHECK-NOT: = 1
// CHECK-NOT: Traceback
