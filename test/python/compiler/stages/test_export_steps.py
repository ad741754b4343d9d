"""Export steps on small modules."""

from jaxlib.mlir import ir

from shardc.compiler.stages import export_steps
from shardc.dialects import make_context

MODULE = """
func.func @main(%arg0: tensor<4xf32>) -> tensor<4xf32> {
  %0 = stablehlo.add %arg0, %arg0 : tensor<4xf32>
  %1 = stablehlo.multiply %0, %0 : tensor<4xf32>
  %2 = stablehlo.negate %arg0 : tensor<4xf32>
  return %2 : tensor<4xf32>
}
"""


def test_erase_dead_ops_erases_unused_chains_and_keeps_the_rest():
    module = ir.Module.parse(MODULE, make_context())
    export_steps.erase_dead_ops(module.operation)
    text = str(module)
    assert "stablehlo.add" not in text and "stablehlo.multiply" not in text
    assert "stablehlo.negate" in text


def test_erase_dead_ops_leaves_a_module_without_dead_ops_as_it_is():
    live = MODULE.replace("%2 = stablehlo.negate %arg0", "%2 = stablehlo.negate %1")
    module = ir.Module.parse(live, make_context())
    before = str(module)
    export_steps.erase_dead_ops(module.operation)
    assert str(module) == before
