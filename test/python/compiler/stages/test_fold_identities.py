"""fold_identities: identity shape ops folded, unit-dimension broadcasts made reshapes."""

from jaxlib.mlir import ir

from shardc.compiler import stages
from shardc.compiler.stages.capture_loop_invariants import (
    hoist_loop_invariants,
    open_free_variables,
)
from shardc.compiler.stages.fold_identities import fold_identities
from shardc.compiler.stages.hlo_order import order_as_hlo
from shardc.compiler.stages.inline_calls import inline_all_calls
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


NESTED_LOOPS = """
sdy.mesh @mesh = <["x"=2, "y"=4]>
func.func @main(%arg0: tensor<8x8xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"x"}, {"y"}]>}, %arg1: tensor<8x8xf32>) -> tensor<8x8xf32> {
  %c = stablehlo.constant dense<0> : tensor<i32>
  %0:3 = stablehlo.while(%i = %c, %w = %arg0, %h = %arg1) : tensor<i32>, tensor<8x8xf32>, tensor<8x8xf32>
  cond {
    %c3 = stablehlo.constant dense<3> : tensor<i32>
    %p = stablehlo.compare LT, %i, %c3, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
    stablehlo.return %p : tensor<i1>
  } do {
    %1:3 = stablehlo.while(%j = %i, %v = %w, %g = %h) : tensor<i32>, tensor<8x8xf32>, tensor<8x8xf32>
    cond {
      %c2 = stablehlo.constant dense<2> : tensor<i32>
      %q = stablehlo.compare LT, %j, %c2, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
      stablehlo.return %q : tensor<i1>
    } do {
      %r = stablehlo.reshape %v : (tensor<8x8xf32>) -> tensor<8x8xf32>
      %y = stablehlo.dot %g, %r : (tensor<8x8xf32>, tensor<8x8xf32>) -> tensor<8x8xf32>
      stablehlo.return %j, %v, %y : tensor<i32>, tensor<8x8xf32>, tensor<8x8xf32>
    }
    %c1 = stablehlo.constant dense<1> : tensor<i32>
    %k = stablehlo.add %i, %c1 : tensor<i32>
    stablehlo.return %k, %w, %1#2 : tensor<i32>, tensor<8x8xf32>, tensor<8x8xf32>
  }
  return %0#2 : tensor<8x8xf32>
}
"""


def _rewritten_step_by_step(module: ir.Operation) -> None:
    inline_all_calls(module)
    fold_identities(module)
    loops = hoist_loop_invariants(module)
    order_as_hlo(module)
    for loop in loops:
        open_free_variables(loop)


def test_folding_and_capturing_in_one_walk_is_folding_then_capturing():
    # The walk that folds also finds the loops, inner first, for capturing their
    # invariants; the blocks are put in HLO's order between hoisting and opening.
    texts = []
    for rewrite in (stages.xla_import_rewrites, _rewritten_step_by_step):
        module = ir.Module.parse(NESTED_LOOPS, make_context())
        with module.context, ir.Location.unknown():
            rewrite(module.operation)
        texts.append(module.operation.get_asm(enable_debug_info=True))
    assert texts[0] == texts[1]
    assert "stablehlo.reshape" not in texts[0] and texts[0].count("sdy.sharding_constraint") == 2


# Calls inside loops whose invariant carries are hoisted (the loops are rebuilt
# around the same blocks), a call with an inline-mesh sharding among folded ops,
# and a callee that names a mesh inline: the census the folding walk takes is the
# import stage's own.
CALLS_IN_LOOPS = NESTED_LOOPS.replace(
    "%y = stablehlo.dot %g, %r", "%d = func.call @f(%r) : (tensor<8x8xf32>) -> tensor<8x8xf32>\n"
    "      %y = stablehlo.dot %g, %d").replace(
    "  return %0#2 : tensor<8x8xf32>\n}", """  %t = stablehlo.transpose %0#2, dims = [0, 1] : (tensor<8x8xf32>) -> tensor<8x8xf32>
  %e = func.call @f(%t) {sdy.sharding = #sdy.sharding_per_value<[<mesh<["z"=2]>, [{"z"}, {}]>]>} : (tensor<8x8xf32>) -> tensor<8x8xf32>
  return %e : tensor<8x8xf32>
}
func.func private @f(%arg0: tensor<8x8xf32>) -> tensor<8x8xf32> {
  %0 = sdy.sharding_constraint %arg0 <mesh<["y"=2]>, [{"y"}, {}]> : tensor<8x8xf32>
  %1 = func.call @g(%0) : (tensor<8x8xf32>) -> tensor<8x8xf32>
  return %1 : tensor<8x8xf32>
}
func.func private @g(%arg0: tensor<8x8xf32>) -> tensor<8x8xf32> {
  %0 = stablehlo.negate %arg0 : tensor<8x8xf32>
  return %0 : tensor<8x8xf32>
}""")


def test_the_census_the_rewrites_take_is_the_import_stages_own():
    texts = []
    for census in (True, False):
        module = ir.Module.parse(CALLS_IN_LOOPS, make_context())
        with module.context, ir.Location.unknown():
            found = stages.xla_import_rewrites(module.operation, census=census)
            if census:
                own = stages._import_census(module.operation)
                assert found.calls == own.calls
                assert found.inline_meshes.found and own.inline_meshes.found
            stages.import_pipeline(module.operation, found)
        texts.append(module.operation.get_asm(enable_debug_info=True))
    assert texts[0] == texts[1]
    assert "func.call" not in texts[0] and "mesh<" not in texts[0]
