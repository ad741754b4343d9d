// RUN: not shardc-opt %s --split-input-file 2>%t.err | filecheck %s
// RUN: filecheck %s --input-file=%t.err --check-prefix=ERR
// RUN: not shardc-opt %s 2>&1 | filecheck %s --check-prefix=WHOLE

// Outputs are joined by the marker; a failing chunk prints nothing but the
// others still run; errors carry the line in the original file.
// CHECK:      func.func @first
// CHECK-NEXT:   return
// CHECK-NEXT: }
// CHECK-NEXT: }
// CHECK-NEXT: // -----
// CHECK-NEXT: // -----
// CHECK-NEXT: module {
// CHECK-NEXT:   func.func @third
// ERR: {{.*}}split_input_file.mlir:27:3: error: custom op 'stablehlo.bogus' is unknown
// ERR-NEXT: {{^}}  stablehlo.bogus
// ERR-NEXT: {{^}}  ^
// Without splitting, the first error stops the whole file.
// WHOLE: split_input_file.mlir:27:3: error: custom op 'stablehlo.bogus' is unknown
func.func @first() {
  return
}

// -----

func.func @first() {
  stablehlo.bogus
}

// -----

func.func @third() {
  return
}

// -----

func.func @first() {
  return
}
