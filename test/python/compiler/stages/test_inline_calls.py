"""Inlining calls: each inlined op is located at the call that brought it in."""

from jaxlib.mlir import ir

from shardc.compiler.stages.inline_calls import inline_all_calls
from shardc.dialects import make_context

MODULE = """
func.func @main(%arg0: tensor<4xf32>) -> tensor<4xf32> {
  %0 = func.call @_take(%arg0) : (tensor<4xf32>) -> tensor<4xf32> loc("model.py":12:4)
  return %0 : tensor<4xf32>
}
func.func private @_take(%arg0: tensor<4xf32>) -> tensor<4xf32> {
  %0 = stablehlo.negate %arg0 : tensor<4xf32> loc("gather\\22x\\C3\\A9")
  %1 = stablehlo.add %0, %0 : tensor<4xf32> loc("lib.py":3:1)
  return %1 : tensor<4xf32>
}
"""


def test_inlined_ops_are_located_at_the_call():
    module = ir.Module.parse(MODULE, make_context())
    assert inline_all_calls(module.operation) == 1
    main = module.body.operations[0]
    negate, add = list(main.regions[0].blocks[0].operations)[:2]
    # A bare name (jax's private helpers) gets the call's position under its name,
    # jax's own form for a traced op; a located op becomes a call site.
    assert str(negate.location) == 'loc("gather\\22x\\C3\\A9"("model.py":12:4))'
    assert str(add.location) == 'loc(callsite("lib.py":3:1 at "model.py":12:4))'


TWO_CALLS = """
func.func @main(%arg0: tensor<4xf32>) -> tensor<4xf32> {
  %0 = func.call @f(%arg0) : (tensor<4xf32>) -> tensor<4xf32> loc("model.py":1:0)
  %1 = func.call @f(%0) : (tensor<4xf32>) -> tensor<4xf32> loc("model.py":2:0)
  return %1 : tensor<4xf32>
}
func.func private @f(%arg0: tensor<4xf32>) -> tensor<4xf32> {
  %0 = stablehlo.negate %arg0 : tensor<4xf32> loc("lib.py":3:1)
  %1 = stablehlo.abs %0 : tensor<4xf32> loc("lib.py":3:1)
  %2 = stablehlo.exponential %1 : tensor<4xf32> loc("exp")
  %3 = stablehlo.sine %2 : tensor<4xf32> loc("named"("lib.py":4:2))
  return %3 : tensor<4xf32>
}
"""


def test_each_call_site_locates_its_own_copy_of_a_shared_location():
    # Relocated locations are remembered by (op location, call location): ops that
    # share a location share its relocation, and each call keeps its own. Only a
    # name without a location of its own is a bare name.
    module = ir.Module.parse(TWO_CALLS, make_context())
    assert inline_all_calls(module.operation) == 2
    main = module.body.operations[0]
    locations = [str(op.location) for op in list(main.regions[0].blocks[0].operations)[:8]]
    assert locations == [
        'loc(callsite("lib.py":3:1 at "model.py":1:0))',
        'loc(callsite("lib.py":3:1 at "model.py":1:0))',
        'loc("exp"("model.py":1:0))',
        'loc(callsite("named"("lib.py":4:2) at "model.py":1:0))',
        'loc(callsite("lib.py":3:1 at "model.py":2:0))',
        'loc(callsite("lib.py":3:1 at "model.py":2:0))',
        'loc("exp"("model.py":2:0))',
        'loc(callsite("named"("lib.py":4:2) at "model.py":2:0))',
    ]


NESTED_CALLS = """
func.func @main(%arg0: tensor<4xf32>) -> tensor<4xf32> {
  %0 = func.call @outer(%arg0) : (tensor<4xf32>) -> tensor<4xf32>
  %1 = func.call @leaf(%0) : (tensor<4xf32>) -> tensor<4xf32>
  return %1 : tensor<4xf32>
}
func.func private @outer(%arg0: tensor<4xf32>) -> tensor<4xf32> {
  %0 = func.call @middle(%arg0) : (tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}
func.func private @middle(%arg0: tensor<4xf32>) -> tensor<4xf32> {
  %0 = func.call @leaf(%arg0) : (tensor<4xf32>) -> tensor<4xf32>
  %1 = stablehlo.negate %0 : tensor<4xf32>
  return %1 : tensor<4xf32>
}
func.func private @leaf(%arg0: tensor<4xf32>) -> tensor<4xf32> {
  %0 = stablehlo.abs %arg0 : tensor<4xf32>
  return %0 : tensor<4xf32>
}
"""


def test_calls_brought_in_by_an_inlined_callee_are_inlined_too():
    # Each round after the first inlines the calls the bodies inlined before brought in.
    module = ir.Module.parse(NESTED_CALLS, make_context())
    with module.context:
        assert inline_all_calls(module.operation) == 6
    functions = {ir.StringAttr(op.attributes["sym_name"]).value: op
                 for op in module.body.operations}
    for name, names in (("main", ["stablehlo.abs", "stablehlo.negate", "stablehlo.abs"]),
                        ("outer", ["stablehlo.abs", "stablehlo.negate"]),
                        ("middle", ["stablehlo.abs", "stablehlo.negate"])):
        body = functions[name].regions[0].blocks[0].operations
        assert [op.name for op in body][:-1] == names
