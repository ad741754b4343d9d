// 1 MB of split markers: like mlir-opt the first chunk starts with "--" and
// fails to parse; the other 116k chunks are empty modules.
// RUN: %python -c "import sys; sys.stdout.write('// -----\n' * 116508)" > %t.mlir
// RUN: not shardc-opt %t.mlir --split-input-file 2>&1 >/dev/null | filecheck %s
// CHECK-NOT: Traceback
// CHECK: .mlir:1:7: error: expected operation name in quotes
// CHECK-NOT: Traceback
