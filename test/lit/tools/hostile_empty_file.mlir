// An empty file is an empty module for mlir-opt (exit 0); split mode prints nothing.
// RUN: %python -c "pass" > %t.mlir
// RUN: shardc-opt %t.mlir 2>&1 | filecheck %s
// RUN: shardc-opt %t.mlir --split-input-file --shardc-drop-shardings 2>&1 | filecheck %s --check-prefix=SPLIT --allow-empty
// CHECK-NOT: Traceback
// CHECK: module {
// CHECK-NEXT: }
// SPLIT-NOT: {{.}}
