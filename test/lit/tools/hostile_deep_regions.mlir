// MLIR's recursive parser would overflow the stack here; shardc-opt refuses.
// RUN: %python -c "print('\"test.op\"() ({\n' * 100000 + '}) : () -> ()\n' * 100000)" > %t.mlir
// RUN: not shardc-opt %t.mlir --allow-unregistered-dialect 2>&1 | filecheck %s
// CHECK-NOT: Traceback
// CHECK: .mlir:501:{{[0-9]+}}: error: nesting deeper than 1000 levels is not supported
// CHECK-NOT: Traceback
