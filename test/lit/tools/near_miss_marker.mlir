// RUN: shardc-opt %s --split-input-file 2>&1 | filecheck %s

// A marker followed by a digit is a near miss: MLIR warns and keeps one chunk.
// CHECK: near_miss_marker.mlir:[[# @LINE + 4]]:7: warning: near miss with file split marker
func.func @f() {
  return
}
// -----0
func.func @g() {
  return
}
// CHECK: func.func @f
// CHECK-NOT: // -----
// CHECK: func.func @g
