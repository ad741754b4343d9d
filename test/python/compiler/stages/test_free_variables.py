"""free_variables: what a loop's or conditional's regions read from outside it, in
the order of first use, however deep the reading op is nested."""

from jaxlib.mlir import ir

from shardc.compiler.stages.capture_loop_invariants import free_variables
from shardc.dialects import make_context

# The loop's body reads %arg1 (twice), and a conditional nested in it reads %arg2,
# %arg1 again, the body's carry %w, its own branch's %n and %arg3; the body's own
# values, its block arguments and the branch's are not free.
NESTED = """
func.func @main(%arg0: tensor<8xf32>, %arg1: tensor<8xf32>, %arg2: tensor<8xf32>, %arg3: tensor<8xf32>, %p: tensor<i1>) -> tensor<8xf32> {
  %c = stablehlo.constant dense<0> : tensor<i32>
  %0:2 = stablehlo.while(%i = %c, %w = %arg0) : tensor<i32>, tensor<8xf32>
  cond {
    %c3 = stablehlo.constant dense<3> : tensor<i32>
    %q = stablehlo.compare LT, %i, %c3, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
    stablehlo.return %q : tensor<i1>
  } do {
    %a = stablehlo.add %w, %arg1 : tensor<8xf32>
    %b = "stablehlo.if"(%p) ({
      %n = stablehlo.multiply %arg2, %arg1 : tensor<8xf32>
      %m = stablehlo.add %n, %a : tensor<8xf32>
      stablehlo.return %m : tensor<8xf32>
    }, {
      %s = stablehlo.subtract %w, %arg3 : tensor<8xf32>
      stablehlo.return %s : tensor<8xf32>
    }) : (tensor<i1>) -> tensor<8xf32>
    %d = stablehlo.add %b, %arg1 : tensor<8xf32>
    stablehlo.return %i, %d : tensor<i32>, tensor<8xf32>
  }
  return %0#1 : tensor<8xf32>
}
"""


def _named(values: list[ir.Value]) -> list[str]:
    return [value.get_name() for value in values]


def test_free_variables_of_a_loop_and_of_a_conditional_nested_in_it():
    module = ir.Module.parse(NESTED, make_context())
    with module.context:
        body = module.body.operations[0].regions[0].blocks[0]
        loop = next(op.operation for op in body.operations if op.operation.name == "stablehlo.while")
        # The walk meets the conditional's ops before the conditional itself (post-order):
        # %arg2 is first used there, and %p by the conditional after them.
        assert _named(free_variables(loop)) == ["%arg1", "%arg2", "%arg3", "%arg4"]
        loop_body = loop.regions[1].blocks[0]
        branch = next(op.operation for op in loop_body.operations
                      if op.operation.name == "stablehlo.if")
        assert _named(free_variables(branch)) == ["%arg2", "%arg1", "%1", "%iterArg_0", "%arg3"]
