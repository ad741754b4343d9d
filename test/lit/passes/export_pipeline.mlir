// RUN: shardc-opt %s --split-input-file --shardc-user-priority-propagate --shardc-export-pipeline | filecheck %s

// After propagation, the export closes every sharding, gives the result its
// propagated sharding, turns the constraint into a reshard and makes the
// concatenate's operand conflict explicit.
// CHECK-LABEL: func @main(
// CHECK-SAME:  -> (tensor<32x16xf32> {sdy.sharding = #sdy.sharding<@m, [{}, {"x"}]>})
// CHECK-NEXT:  %[[A:.*]] = sdy.reshard %arg0 <@m, [{}, {"x"}]> : tensor<16x16xf32>
// CHECK-NEXT:  %[[C:.*]] = stablehlo.concatenate %[[A]], %arg1, dim = 0 {sdy.sharding = #sdy.sharding_per_value<[<@m, [{}, {"x"}]>]>}
// CHECK-NEXT:  %[[R:.*]] = sdy.reshard %[[C]] <@m, [{}, {"x"}]> : tensor<32x16xf32>
// CHECK-NEXT:  %[[N:.*]] = stablehlo.negate %[[R]] {sdy.sharding = #sdy.sharding_per_value<[<@m, [{}, {"x"}]>]>}
// CHECK-NEXT:  return %[[N]]
// CHECK-NOT:   ?
sdy.mesh @m = <["x"=4, "y"=2]>
func.func @main(%arg0: tensor<16x16xf32> {sdy.sharding = #sdy.sharding<@m, [{"x"}, {}]>}, %arg1: tensor<16x16xf32> {sdy.sharding = #sdy.sharding<@m, [{}, {"x"}]>}) -> (tensor<32x16xf32>) {
  %0 = stablehlo.concatenate %arg0, %arg1, dim = 0 : (tensor<16x16xf32>, tensor<16x16xf32>) -> tensor<32x16xf32>
  %1 = sdy.sharding_constraint %0 <@m, [{}, {"x"}]> : tensor<32x16xf32>
  %2 = stablehlo.negate %1 : tensor<32x16xf32>
  return %2 : tensor<32x16xf32>
}

// -----

// Open dimensions are closed and replicated lists dropped.
// CHECK-LABEL: func @closes(
// CHECK-SAME:  %arg0: tensor<8x8xf32> {sdy.sharding = #sdy.sharding<@m, [{"x"}, {}]>}
// CHECK:       stablehlo.negate %arg0 {sdy.sharding = #sdy.sharding_per_value<[<@m, [{"x"}, {}]>]>}
sdy.mesh @m = <["x"=4, "y"=2]>
func.func @closes(%arg0: tensor<8x8xf32> {sdy.sharding = #sdy.sharding<@m, [{"x", ?}, {?}], replicated={"y"}>}) -> tensor<8x8xf32> {
  %0 = stablehlo.negate %arg0 : tensor<8x8xf32>
  return %0 : tensor<8x8xf32>
}
