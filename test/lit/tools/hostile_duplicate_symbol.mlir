// RUN: not shardc-opt %s 2>&1 | filecheck %s
// CHECK-NOT: Traceback
// CHECK: hostile_duplicate_symbol.mlir:[[# @LINE + 3]]:1: error: redefinition of symbol named 'm'
// CHECK-NOT: Traceback
sdy.mesh @m = <["x"=2]>
sdy.mesh @m = <["y"=2]>
