// RUN: shardc-opt %s --pass-pipeline='builtin.module(shardc-lift-inlined-meshes{add-stablehlo-mesh=false report-duplicates=false},canonicalize)' | filecheck %s
// RUN: shardc-opt %s --pass-pipeline='builtin.module(sdy-lift-inlined-meshes{add-stablehlo-mesh=false}, cse, func.func(canonicalize))' | filecheck %s
// RUN: shardc-opt %s -pass-pipeline='shardc-lift-inlined-meshes{add-stablehlo-mesh=0}' | filecheck %s
// RUN: not shardc-opt %s --pass-pipeline='builtin.module(shardc-lift-inlined-meshes{add-stablehlo-mesh=false' 2>&1 | filecheck %s --check-prefix=UNCLOSED
// RUN: not shardc-opt %s --pass-pipeline='builtin.module(shardc-drop-shardings)' --cse 2>&1 | filecheck %s --check-prefix=MIXED
// RUN: not shardc-opt %s --pass-pipeline='builtin.module(func.func(shardc-drop-shardings))' 2>&1 | filecheck %s --check-prefix=NESTED
// RUN: not shardc-opt %s --pass-pipeline='builtin.module(shardc-drop-shardings{strict=maybe})' 2>&1 | filecheck %s --check-prefix=BADVALUE

// CHECK:      sdy.mesh @mesh = <["x"=2]>{{$}}
// CHECK-LABEL: func @f
// CHECK-SAME: #sdy.sharding<@mesh, [{"x"}]>
// UNCLOSED: shardc-opt: error: expected '}' at position
// MIXED: shardc-opt: error: '--pass-pipeline' cannot be combined with individual pass flags
// NESTED: shardc-opt: error: shardc pass 'shardc-drop-shardings' runs on 'builtin.module' only
// BADVALUE: shardc-opt: error: invalid value 'maybe' for option 'strict' of pass 'shardc-drop-shardings': expected true or false
func.func @f(%arg0: tensor<8xf32> {sdy.sharding = #sdy.sharding<mesh<["x"=2]>, [{"x"}]>}) -> tensor<8xf32> {
  return %arg0 : tensor<8xf32>
}
