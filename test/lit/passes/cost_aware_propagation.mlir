// RUN: shardc-opt %s --shardc-propagation-pipeline='conflict-resolution=cost-aware' | filecheck %s --check-prefix=CA
// RUN: shardc-opt %s --shardc-propagation-pipeline | filecheck %s --check-prefix=SDY

// Mismatched MLP (bench/models/conflict_mlp.py): Shardy keeps the hidden
// sharding of the bigger weight and gathers %arg2 for the second dot; the
// cost-aware strategy computes the second dot contracting-sharded (partial
// sums, one all-reduce) and makes the operand reshard explicit. XLA's own
// import keeps only boundaries and constraints, so the changed dot's result is
// also constrained to what the search decided, and the module is marked for
// XLA's copy to constrain every op's (XLA would re-derive the others).
// SDY-NOT: shardc.keep_op_shardings
// CA: module attributes {shardc.keep_op_shardings}
// SDY-LABEL: func @main
// SDY: stablehlo.dot_general %arg0, %arg1{{.*}}<@mesh, [{}, {"x"}]>
// SDY-NOT: sdy.reshard
// SDY: stablehlo.dot_general %{{.*}}, %arg2{{.*}}<@mesh, [{"x"}, {}]>
// SDY-NOT: sdy.sharding_constraint
// CA-LABEL: func @main
// CA: stablehlo.dot_general %arg0, %arg1{{.*}}<@mesh, [{}, {"x"}]>
// CA: %[[R:.*]] = sdy.reshard %arg2 <@mesh, [{"x"}, {}]>
// CA: %[[D:.*]] = stablehlo.dot_general %{{.*}}, %[[R]]{{.*}}<@mesh, [{}, {}]>
// CA: %[[C:.*]] = sdy.sharding_constraint %[[D]] <@mesh, [{}, {}]>
// CA: return %[[C]]
// CA-NOT: cost_aware_id
sdy.mesh @mesh = <["x"=8]>
func.func @main(%arg0: tensor<64x256xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"x"}, {}]>}, %arg1: tensor<256x1024xf32> {sdy.sharding = #sdy.sharding<@mesh, [{}, {"x"}]>}, %arg2: tensor<1024x256xf32> {sdy.sharding = #sdy.sharding<@mesh, [{}, {"x"}]>}) -> (tensor<64x256xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"x"}, {}]>}) {
  %0 = stablehlo.dot_general %arg0, %arg1, contracting_dims = [1] x [0] : (tensor<64x256xf32>, tensor<256x1024xf32>) -> tensor<64x1024xf32>
  %1 = stablehlo.constant dense<0.000000e+00> : tensor<f32>
  %2 = stablehlo.broadcast_in_dim %1, dims = [] : (tensor<f32>) -> tensor<64x1024xf32>
  %3 = stablehlo.maximum %0, %2 : tensor<64x1024xf32>
  %4 = stablehlo.dot_general %3, %arg2, contracting_dims = [1] x [0] : (tensor<64x1024xf32>, tensor<1024x256xf32>) -> tensor<64x256xf32>
  return %4 : tensor<64x256xf32>
}
