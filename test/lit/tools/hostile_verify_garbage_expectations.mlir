// Designators pointing nowhere and unterminated regexes are reported, not crashes.
// RUN: not shardc-opt %s --verify-diagnostics 2>&1 | filecheck %s
// CHECK-NOT: Traceback
// CHECK: error: found start of regex with no end '}}'
// CHECK: error: expected error "x" was not produced
// CHECK-NOT: Traceback
// expected-error-re@+1 {{a {{b}}
// expected-error@-100000 {{x}}
func.func @f() {
  return
}
