// RUN: shardc-opt --list-passes | filecheck %s
// RUN: shardc-opt -list-passes | filecheck %s

// CHECK:      shardc-drop-shardings: Remove all sdy shardings, sharding ops and mesh symbols
// CHECK-NEXT:     keep-meshes: bool = false  -- leave the sdy.mesh symbols in place
// CHECK-NEXT:     strict: bool = false  -- fail on an op that must keep its shardings instead of warning
// CHECK:      shardc-lift-inlined-meshes: Replace inline meshes in shardings by de-duplicated sdy.mesh symbols
// CHECK-NEXT:     aliases: sdy-lift-inlined-meshes
// CHECK-NEXT:     add-stablehlo-mesh: bool = true  -- {{.+}}
// CHECK-NEXT:     report-duplicates: bool = false  -- {{.+}}
// CHECK: generic MLIR passes: canonicalize, cse, inline, symbol-dce
