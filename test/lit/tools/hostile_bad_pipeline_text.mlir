// RUN: not shardc-opt %s --pass-pipeline='builtin.module(,,{)' 2>&1 | filecheck %s
// RUN: not shardc-opt %s --pass-pipeline='builtin.module(cse)) trailing' 2>&1 | filecheck %s
// RUN: not shardc-opt %s --shardc-drop-shardings='strict="unterminated' 2>&1 | filecheck %s
// CHECK-NOT: Traceback
// CHECK: shardc-opt: error:
// CHECK-NOT: Traceback
func.func @f() {
  return
}
