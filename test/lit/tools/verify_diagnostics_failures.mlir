// RUN: not shardc-opt %s --split-input-file --verify-diagnostics 2>&1 | filecheck %s
// CHECK-NOT: Traceback

// An error nobody expected.
// CHECK: {{.*}}verify_diagnostics_failures.mlir:[[# @LINE + 2]]:3: error: unexpected error: custom op 'stablehlo.bogus' is unknown
func.func @unexpected() {
  stablehlo.bogus
}

// -----

// An expected error that never comes.
// CHECK: {{.*}}verify_diagnostics_failures.mlir:[[# @LINE + 1]]:4: error: expected error "never produced" was not produced
// expected-error@+1 {{never produced}}
func.func @missing() {
  return
}

// -----

// Right message, wrong severity.
// CHECK: {{.*}}verify_diagnostics_failures.mlir:[[# @LINE + 1]]:6: error: 'error' diagnostic emitted when expecting a 'warning'
  // expected-warning@+1 {{custom op 'stablehlo.bogus2' is unknown}}
  stablehlo.bogus2

// -----

// A malformed regex is reported at its comment.
// CHECK: {{.*}}verify_diagnostics_failures.mlir:[[# @LINE + 1]]:4: error: invalid regex: {{.*}}
// expected-error-re@+1 {{a {{[}} b}}
func.func @bad_regex() {
  return
}

// -----

// The wrong line does not match.
// CHECK: {{.*}}verify_diagnostics_failures.mlir:[[# @LINE + 3]]:3: error: unexpected error: custom op 'stablehlo.bogus3' is unknown
func.func @wrong_line() {
  // expected-error@+2 {{custom op 'stablehlo.bogus3' is unknown}}
  stablehlo.bogus3
}
// CHECK: error: expected error "custom op 'stablehlo.bogus3' is unknown" was not produced
// CHECK-NOT: Traceback
