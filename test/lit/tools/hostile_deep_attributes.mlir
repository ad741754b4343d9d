// RUN: %python -c "print('module attributes {a = ' + '[' * 200000 + ']' * 200000 + '} {}')" > %t.mlir
// RUN: not shardc-opt %t.mlir 2>&1 | filecheck %s
// CHECK-NOT: Traceback
// CHECK: .mlir:1:{{[0-9]+}}: error: nesting deeper than 1000 levels is not supported
// CHECK-NOT: Traceback
