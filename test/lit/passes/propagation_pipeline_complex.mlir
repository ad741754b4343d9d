// RUN: shardc-opt %s -sdy-propagation-pipeline -shardc-export-pipeline -shardc-check-shardings --comm-report --explain | filecheck %s

// Complex-valued constants: the bindings cannot read their value attribute (reading
// it by position aborts the process), so no step reads it through them: as in
// Shardy, the two equal constants become one sdy.constant, sharded like its users.
// CHECK-LABEL: func @complex_constant(
// CHECK:       %[[C:.*]] = sdy.constant {sdy.sharding = #sdy.sharding_per_value<[<@mesh, [{"x"}]>]>} dense<(0.000000e+00,1.000000e+00)> : tensor<8xcomplex<f32>>
// CHECK-NOT:   constant
// CHECK:       stablehlo.multiply %arg0, %[[C]] {sdy.sharding = #sdy.sharding_per_value<[<@mesh, [{"x"}]>]>}
// CHECK:       // totals:
sdy.mesh @mesh = <["x"=4]>
func.func @complex_constant(%arg0: tensor<8xcomplex<f32>> {sdy.sharding = #sdy.sharding<@mesh, [{"x"}]>}) -> tensor<8xcomplex<f32>> {
  %c = stablehlo.constant dense<(0.0,1.0)> : tensor<8xcomplex<f32>>
  %c2 = stablehlo.constant dense<(0.0,1.0)> : tensor<8xcomplex<f32>>
  %0 = stablehlo.multiply %arg0, %c : tensor<8xcomplex<f32>>
  %1 = stablehlo.add %0, %c2 : tensor<8xcomplex<f32>>
  return %1 : tensor<8xcomplex<f32>>
}
