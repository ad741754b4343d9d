// Passes that read shardings through mesh symbols refuse an inline mesh at its op;
// each of these failed with an internal ValueError and no location.
// RUN: not shardc-opt %s --shardc-check-shardings 2>&1 | filecheck %s -DPASS=shardc-check-shardings
// RUN: not shardc-opt %s --shardc-export-pipeline 2>&1 | filecheck %s -DPASS=shardc-export-pipeline
// RUN: not shardc-opt %s --shardc-insert-explicit-reshards 2>&1 | filecheck %s -DPASS=shardc-insert-explicit-reshards
// RUN: not shardc-opt %s --shardc-add-data-flow-edges 2>&1 | filecheck %s -DPASS=shardc-add-data-flow-edges
// RUN: shardc-opt %s --shardc-lift-inlined-meshes --shardc-check-shardings | filecheck %s --check-prefix=LIFTED
// CHECK-NOT: internal error
// CHECK: inline_mesh_passes.mlir:[[# @LINE + 3]]:1: error: [[PASS]] needs meshes as sdy.mesh symbols, but 'arg_attrs' writes its mesh inline; run shardc-lift-inlined-meshes first
// CHECK-NOT: internal error
// LIFTED: sdy.mesh @mesh = <["x"=2]>
func.func @main(%arg0: tensor<8xf32> {sdy.sharding = #sdy.sharding<mesh<["x"=2]>, [{"x"}]>}) -> tensor<8xf32> {
  %0 = stablehlo.while(%a = %arg0) : tensor<8xf32>
   cond {
    %c = stablehlo.constant dense<true> : tensor<i1>
    stablehlo.return %c : tensor<i1>
  } do {
    stablehlo.return %a : tensor<8xf32>
  }
  return %0 : tensor<8xf32>
}
