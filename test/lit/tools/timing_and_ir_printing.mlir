// RUN: shardc-opt %s --shardc-lift-inlined-meshes --cse --mlir-timing 2>&1 >/dev/null | filecheck %s --check-prefix=TIMING
// RUN: shardc-opt %s --shardc-lift-inlined-meshes --cse --mlir-print-ir-after-all 2>&1 >/dev/null | filecheck %s --check-prefix=IR

// TIMING: Execution time report
// TIMING: LiftInlinedMeshesPass
// TIMING: CSE
// IR: // -----// IR Dump After LiftInlinedMeshesPass: shardc-lift-inlined-meshes //----- //
// IR: sdy.mesh @mesh = <["x"=2]>
// IR: // -----// IR Dump After CSEPass: cse //----- //
func.func @f(%arg0: tensor<8xf32> {sdy.sharding = #sdy.sharding<mesh<["x"=2]>, [{"x"}]>}) -> tensor<8xf32> {
  return %arg0 : tensor<8xf32>
}
