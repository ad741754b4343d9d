// RUN: shardc-opt %s --split-input-file --shardc-drop-shardings --verify-diagnostics | filecheck %s
// RUN: shardc-opt %s --split-input-file --shardc-drop-shardings='keep-meshes=true' --verify-diagnostics | filecheck %s --check-prefix=KEEP

// Argument, result and op shardings go; constraints and reshards are bypassed.
// CHECK-NOT:   sdy.mesh
// CHECK-LABEL: func @plain(%arg0: tensor<8xf32>) -> tensor<8xf32> {
// CHECK-NEXT:    %0 = stablehlo.add %arg0, %arg0 : tensor<8xf32>
// CHECK-NEXT:    %1 = stablehlo.multiply %0, %0 : tensor<8xf32>
// CHECK-NEXT:    return %1 : tensor<8xf32>
// KEEP:        sdy.mesh @mesh = <["x"=2]>
// KEEP-LABEL:  func @plain(%arg0: tensor<8xf32>) -> tensor<8xf32> {
sdy.mesh @mesh = <["x"=2]>
func.func @plain(%arg0: tensor<8xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"x"}]>})
    -> (tensor<8xf32> {sdy.sharding = #sdy.sharding<@mesh, [{}]>}) {
  %0 = stablehlo.add %arg0, %arg0 {sdy.sharding = #sdy.sharding_per_value<[<@mesh, [{"x"}]>]>} : tensor<8xf32>
  %1 = sdy.sharding_constraint %0 <@mesh, [{"x"}]> : tensor<8xf32>
  %2 = sdy.reshard %1 <@mesh, [{}]> : tensor<8xf32>
  %3 = stablehlo.multiply %2, %2 : tensor<8xf32>
  return %3 : tensor<8xf32>
}

// -----

// Other argument attributes survive.
// CHECK-LABEL: func @other_attrs(%arg0: tensor<8xf32> {jax.buffer_donor = true}) -> tensor<8xf32>
sdy.mesh @mesh = <["x"=2]>
func.func @other_attrs(%arg0: tensor<8xf32> {jax.buffer_donor = true, sdy.sharding = #sdy.sharding<@mesh, [{"x"}]>}) -> tensor<8xf32> {
  return %arg0 : tensor<8xf32>
}

// -----

// A manual computation keeps its shardings (with a warning), and its mesh stays.
// CHECK:       sdy.mesh @mesh = <["q"=2]>
// CHECK-LABEL: func @manual
// CHECK:       sdy.manual_computation(%arg0) in_shardings=[<@mesh, [{"q"}]>]
sdy.mesh @mesh = <["q"=2]>
func.func @manual(%arg0: tensor<8xf32>) -> tensor<8xf32> {
  // expected-warning@+1 {{'sdy.manual_computation' keeps its shardings}}
  %0 = sdy.manual_computation(%arg0) in_shardings=[<@mesh, [{"q"}]>] out_shardings=[<@mesh, [{"q"}]>] manual_axes={"q"} (%a: tensor<4xf32>) {
    sdy.return %a : tensor<4xf32>
  } : (tensor<8xf32>) -> tensor<8xf32>
  return %0 : tensor<8xf32>
}
