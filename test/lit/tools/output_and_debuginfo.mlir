// RUN: shardc-opt %s -o %t.out && filecheck %s --input-file=%t.out
// RUN: shardc-opt %s --mlir-print-debuginfo | filecheck %s --check-prefix=LOC
// RUN: shardc-opt %s --split-input-file --mlir-print-debuginfo | filecheck %s --check-prefix=SPLITLOC
// RUN: shardc-opt < %s | filecheck %s
// RUN: shardc-opt - < %s | filecheck %s

// CHECK: func.func @f
// LOC: #[[LOC:loc[0-9]*]] = loc("{{.*}}output_and_debuginfo.mlir":[[# @LINE + 3]]:1)
// SPLITLOC: loc("{{.*}}output_and_debuginfo.mlir":[[# @LINE + 2]]:1)
// SPLITLOC: loc("{{.*}}output_and_debuginfo.mlir":[[# @LINE + 7]]:1)
func.func @f() {
  return
}

// -----

func.func @g() {
  return
}
