"""fold_identities: identity shape ops folded, unit-dimension broadcasts made reshapes."""

from jaxlib.mlir import ir

from shardc.compiler.stages.fold_identities import fold_identities
from shardc.dialects import make_context

BROADCASTS = """
sdy.mesh @mesh = <["x"=2]>
func.func @main(%arg0: tensor<8xf32>, %arg1: tensor<8xf32>) -> (tensor<8xf32>, tensor<8xf32>, tensor<1x8xf32>, tensor<1x8xf32>, tensor<1x8xf32>, tensor<8x8xf32>) {
  %0 = stablehlo.broadcast_in_dim %arg0, dims = [0] : (tensor<8xf32>) -> tensor<8xf32>
  %1 = stablehlo.broadcast_in_dim %arg1, dims = [0] : (tensor<8xf32>) -> tensor<8xf32>
  %2 = stablehlo.broadcast_in_dim %arg0, dims = [1] : (tensor<8xf32>) -> tensor<1x8xf32>
  %3 = stablehlo.broadcast_in_dim %arg1, dims = [1] : (tensor<8xf32>) -> tensor<1x8xf32>
  %4 = stablehlo.broadcast_in_dim %arg1, dims = [1] {sdy.sharding = #sdy.sharding_per_value<[<@mesh, [{}, {"x"}]>]>} : (tensor<8xf32>) -> tensor<1x8xf32>
  %5 = stablehlo.broadcast_in_dim %arg1, dims = [1] : (tensor<8xf32>) -> tensor<8x8xf32>
  return %0, %1, %2, %3, %4, %5 : tensor<8xf32>, tensor<8xf32>, tensor<1x8xf32>, tensor<1x8xf32>, tensor<1x8xf32>, tensor<8x8xf32>
}
"""


def test_equal_broadcasts_are_each_folded_and_a_sharded_one_is_kept():
    # Broadcasts of equal types and dimensions are judged once, and each is rewritten.
    module = ir.Module.parse(BROADCASTS, make_context())
    with module.context:
        assert fold_identities(module.operation) == 4
    ops = list(module.body.operations[1].regions[0].blocks[0].operations)
    assert [op.name for op in ops] == [
        "stablehlo.reshape", "stablehlo.reshape", "stablehlo.broadcast_in_dim",
        "stablehlo.broadcast_in_dim", "func.return"]
    returned = [value.get_name() for value in ops[-1].operands]
    assert returned[:2] == ["%arg0", "%arg1"]
