// Bad options of generic MLIR passes name the pass and the options (not an
// "unknown pass" next to its own name), and a bad pipeline inside inline's
// default-pipeline fails the run instead of printing an error and exiting 0.
// RUN: not shardc-opt %s --canonicalize='foo=1' 2>&1 | filecheck %s --check-prefix=KEY
// RUN: not shardc-opt %s --pass-pipeline='builtin.module(canonicalize{max-iterations=abc})' 2>&1 | filecheck %s --check-prefix=VALUE
// RUN: not shardc-opt %s --inline='default-pipeline=foo' 2>&1 | filecheck %s --check-prefix=INLINE
// RUN: shardc-opt %s --inline='default-pipeline=canonicalize' | filecheck %s --check-prefix=GOOD
// KEY: shardc-opt: error: invalid options 'foo=1' for pass 'canonicalize': MLIR's pass options parser rejects them
// VALUE: shardc-opt: error: invalid options 'max-iterations=abc' for pass 'canonicalize'
// INLINE-NOT: registered pass
// INLINE: shardc-opt: error: invalid value 'foo' for option 'default-pipeline' of pass 'inline': expected a pipeline of known passes
// GOOD: func.func @f
func.func @f() {
  return
}
