// RUN: shardc-opt %s --split-input-file --shardc-insert-explicit-reshards | filecheck %s
// RUN: shardc-opt %s --split-input-file --sdy-insert-explicit-reshards | filecheck %s

// Expected outputs are those of jaxlib's native pass
// (builtin.module(func.func(sdy-insert-explicit-reshards))) on the same input.

// Concatenate: operands sharded otherwise than the result are resharded to it.
// CHECK-LABEL: func @concat_operands_differ(
// CHECK-NEXT:  %[[R:.*]] = sdy.reshard %arg0 <@m, [{}, {"x"}]> : tensor<16x16xf32>
// CHECK-NEXT:  stablehlo.concatenate %[[R]], %arg1, dim = 0
// CHECK-NEXT:  return
sdy.mesh @m = <["x"=4, "y"=2]>
func.func @concat_operands_differ(%arg0: tensor<16x16xf32> {sdy.sharding = #sdy.sharding<@m, [{"x"}, {}]>}, %arg1: tensor<16x16xf32> {sdy.sharding = #sdy.sharding<@m, [{}, {"x"}]>}) -> (tensor<32x16xf32> {sdy.sharding = #sdy.sharding<@m, [{}, {"x"}]>}) {
  %0 = stablehlo.concatenate %arg0, %arg1, dim = 0 {sdy.sharding = #sdy.sharding_per_value<[<@m, [{}, {"x"}]>]>} : (tensor<16x16xf32>, tensor<16x16xf32>) -> tensor<32x16xf32>
  return %0 : tensor<32x16xf32>
}

// -----

// An operand without a sharding counts as replicated and is resharded too.
// CHECK-LABEL: func @concat_unsharded_operand(
// CHECK-NEXT:  %[[A:.*]] = sdy.reshard %arg0 <@m, [{}, {"x"}]> : tensor<16x16xf32>
// CHECK-NEXT:  %[[B:.*]] = sdy.reshard %arg1 <@m, [{}, {"x"}]> : tensor<8x16xf32>
// CHECK-NEXT:  %[[C:.*]] = sdy.reshard %arg2 <@m, [{}, {"x"}]> : tensor<8x16xf32>
// CHECK-NEXT:  stablehlo.concatenate %[[A]], %[[B]], %[[C]], dim = 0
sdy.mesh @m = <["x"=4, "y"=2]>
func.func @concat_unsharded_operand(%arg0: tensor<16x16xf32> {sdy.sharding = #sdy.sharding<@m, [{"x"}, {}]>}, %arg1: tensor<8x16xf32> {sdy.sharding = #sdy.sharding<@m, [{}, {"y"}]>}, %arg2: tensor<8x16xf32>) -> (tensor<32x16xf32> {sdy.sharding = #sdy.sharding<@m, [{}, {"x"}]>}) {
  %0 = stablehlo.concatenate %arg0, %arg1, %arg2, dim = 0 {sdy.sharding = #sdy.sharding_per_value<[<@m, [{}, {"x"}]>]>} : (tensor<16x16xf32>, tensor<8x16xf32>, tensor<8x16xf32>) -> tensor<32x16xf32>
  return %0 : tensor<32x16xf32>
}

// -----

// Operands that agree with the result are left alone.
// CHECK-LABEL: func @concat_compatible(
// CHECK-NOT:   sdy.reshard
sdy.mesh @m = <["x"=4, "y"=2]>
func.func @concat_compatible(%arg0: tensor<16x16xf32> {sdy.sharding = #sdy.sharding<@m, [{"x"}, {}]>}, %arg1: tensor<16x16xf32> {sdy.sharding = #sdy.sharding<@m, [{"x"}, {}]>}) -> (tensor<32x16xf32> {sdy.sharding = #sdy.sharding<@m, [{"x"}, {}]>}) {
  %0 = stablehlo.concatenate %arg0, %arg1, dim = 0 {sdy.sharding = #sdy.sharding_per_value<[<@m, [{"x"}, {}]>]>} : (tensor<16x16xf32>, tensor<16x16xf32>) -> tensor<32x16xf32>
  return %0 : tensor<32x16xf32>
}

// -----

// Dot whose result conflicts on one factor with agreeing operands, the
// result's axis being a reduction axis: the dot is computed like its operands
// (more sharded), and the smaller result is resharded afterwards.
// CHECK-LABEL: func @dot_result_conflict(
// CHECK-NEXT:  %[[D:.*]] = stablehlo.dot_general %arg0, %arg1, contracting_dims = [1] x [0] {sdy.sharding = #sdy.sharding_per_value<[<@m, [{}, {"y"}]>]>}
// CHECK-NEXT:  %[[R:.*]] = sdy.reshard %[[D]] <@m, [{}, {"x"}]> : tensor<4x8xf32>
// CHECK-NEXT:  return %[[R]]
sdy.mesh @m = <["x"=4, "y"=2]>
func.func @dot_result_conflict(%arg0: tensor<4x32xf32> {sdy.sharding = #sdy.sharding<@m, [{}, {"x"}]>}, %arg1: tensor<32x8xf32> {sdy.sharding = #sdy.sharding<@m, [{"x"}, {"y"}]>}) -> (tensor<4x8xf32> {sdy.sharding = #sdy.sharding<@m, [{}, {"x"}]>}) {
  %0 = stablehlo.dot_general %arg0, %arg1, contracting_dims = [1] x [0] {sdy.sharding = #sdy.sharding_per_value<[<@m, [{}, {"x"}]>]>} : (tensor<4x32xf32>, tensor<32x8xf32>) -> tensor<4x8xf32>
  return %0 : tensor<4x8xf32>
}

// -----

// Dots Shardy's non-full pass leaves to XLA: non-contracting dims of both
// operands on one axis, and a contraction sharded differently on each side.
// CHECK-LABEL: func @dot_left_alone(
// CHECK-NOT:   sdy.reshard
sdy.mesh @m = <["x"=4, "y"=2]>
func.func @dot_left_alone(%arg0: tensor<16x32xf32> {sdy.sharding = #sdy.sharding<@m, [{"x"}, {}]>}, %arg1: tensor<32x64xf32> {sdy.sharding = #sdy.sharding<@m, [{}, {"x"}]>}, %arg2: tensor<32x64xf32> {sdy.sharding = #sdy.sharding<@m, [{"y"}, {}]>}) -> (tensor<16x64xf32> {sdy.sharding = #sdy.sharding<@m, [{"x"}, {}]>}) {
  %0 = stablehlo.dot_general %arg0, %arg1, contracting_dims = [1] x [0] {sdy.sharding = #sdy.sharding_per_value<[<@m, [{"x"}, {}]>]>} : (tensor<16x32xf32>, tensor<32x64xf32>) -> tensor<16x64xf32>
  %1 = stablehlo.dot_general %arg0, %arg2, contracting_dims = [1] x [0] {sdy.sharding = #sdy.sharding_per_value<[<@m, [{"x"}, {}]>]>} : (tensor<16x32xf32>, tensor<32x64xf32>) -> tensor<16x64xf32>
  %2 = stablehlo.add %0, %1 {sdy.sharding = #sdy.sharding_per_value<[<@m, [{"x"}, {}]>]>} : tensor<16x64xf32>
  return %2 : tensor<16x64xf32>
}
