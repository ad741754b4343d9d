// A mesh of 2^64 devices parses and propagates, but the reports model every
// device: they refuse it at the mesh instead of failing inside numpy.
// RUN: not shardc-opt %s --comm-report 2>&1 | filecheck %s -DFLAG=--comm-report
// RUN: not shardc-opt %s --explain 2>&1 | filecheck %s -DFLAG=--explain
// RUN: not shardc-opt %s --strict 2>&1 | filecheck %s -DFLAG=--strict
// RUN: shardc-opt %s --sdy-propagation-pipeline | filecheck %s --check-prefix=PLAIN
// CHECK-NOT: internal error
// CHECK: hostile_huge_mesh_reports.mlir:[[# @LINE + 3]]:1: error: [[FLAG]]: mesh @mesh has 18446744073709551616 devices; the reports model at most 131072
// CHECK-NOT: internal error
// PLAIN: sdy.mesh @mesh
sdy.mesh @mesh = <["x"=4611686018427387904, "y"=4]>
func.func @main(%arg0: tensor<8x16xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"x"}, {"y"}]>}) -> tensor<8x16xf32> {
  %0 = stablehlo.add %arg0, %arg0 : tensor<8x16xf32>
  return %0 : tensor<8x16xf32>
}
