"""put_constants_last: a commutative op's constant operand goes last, as XLA's
canonicalization puts it before its Shardy runs."""

from jaxlib.mlir import ir

from shardc.compiler.stages.constants_last import put_constants_last
from shardc.dialects import make_context

PROGRAM = """
func.func @main(%x: tensor<8xf32>, %y: tensor<8xf32>) -> (tensor<8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>) {
  %c = stablehlo.constant dense<1.000000e-01> : tensor<f32>
  %b = stablehlo.broadcast_in_dim %c, dims = [] : (tensor<f32>) -> tensor<8xf32>
  %0 = stablehlo.multiply %b, %x : tensor<8xf32>
  %1 = stablehlo.add %x, %b : tensor<8xf32>
  %2 = stablehlo.subtract %b, %x : tensor<8xf32>
  %3 = stablehlo.maximum %y, %x : tensor<8xf32>
  return %0, %1, %2, %3 : tensor<8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>
}
"""


def test_constant_operands_of_commutative_ops_go_last():
    module = ir.Module.parse(PROGRAM, make_context())
    with module.context:
        ops = [op.operation for op in module.body.operations[0].regions[0].blocks[0].operations]
        multiply, add, subtract, maximum = ops[2:6]
        x, y = module.body.operations[0].regions[0].blocks[0].arguments
        # Only the multiply has its constant first; subtract does not commute.
        assert put_constants_last([multiply, add, maximum]) == 1
        assert multiply.operands[0] == x and multiply.operands[1] == ops[1].result
        assert add.operands[0] == x
        assert subtract.operands[1] == x
        assert maximum.operands[0] == y
        module.operation.verify()
