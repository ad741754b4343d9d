// RUN: not shardc-opt < %s 2>&1 | filecheck %s
// RUN: not shardc-opt %s -o %t.never 2>&1 | filecheck %s --check-prefix=FILE
// RUN: not ls %t.never

// CHECK-NOT: Traceback
// CHECK: <stdin>:[[# @LINE + 3]]:3: error: custom op 'stablehlo.bogus' is unknown
// FILE: stdin_errors.mlir:[[# @LINE + 2]]:3: error: custom op 'stablehlo.bogus' is unknown
func.func @f() {
  stablehlo.bogus
}
// CHECK-NOT: Traceback
