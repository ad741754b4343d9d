// A dot whose operands disagree with its result: shardc-opt says what it will cost.
// shardc-opt examples/dot_conflict.mlir -sdy-propagation-pipeline -shardc-check-shardings --comm-report
sdy.mesh @mesh = <["x"=4, "y"=2]>
func.func @main(%arg0: tensor<8x6xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"x"}, {"y"}]>}, %arg1: tensor<6x16xf32> {sdy.sharding = #sdy.sharding<@mesh, [{}, {"x"}]>}) -> (tensor<8x16xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"x"}, {}]>}) {
  %0 = stablehlo.dot_general %arg0, %arg1, contracting_dims = [1] x [0] : (tensor<8x6xf32>, tensor<6x16xf32>) -> tensor<8x16xf32>
  return %0 : tensor<8x16xf32>
}
