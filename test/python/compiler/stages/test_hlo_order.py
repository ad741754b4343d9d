"""order_as_hlo: every block in HLO's post-order, a loop's captures after its operands;
restore_jax_order: the blocks back in jax's order once propagated."""

from jaxlib.mlir import ir

from shardc.compiler.stages import import_pipeline
from shardc.compiler.stages.hlo_order import (
    ORDER_ATTR,
    REORDERED_ATTR,
    order_as_hlo,
    restore_jax_order,
)
from shardc.compiler.stages.shardy_pipeline import shardy_pipeline
from shardc.dialects import make_context

# jax's order: the weight's reshape first, the loop's counter last; in the body, the
# elementwise term before the product that feeds the first result.
PROGRAM = """
sdy.mesh @mesh = <["x"=2, "y"=2]>
func.func @main(%w: tensor<4xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"y"}]>}, %x: tensor<8x4xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"x"}, {}]>}) -> tensor<8x4xf32> {
  %r = stablehlo.reshape %w : (tensor<4xf32>) -> tensor<1x4xf32>
  %z = stablehlo.constant dense<0> : tensor<i32>
  %0:2 = stablehlo.while(%i = %z, %q = %x) : tensor<i32>, tensor<8x4xf32>
  cond {
    %three = stablehlo.constant dense<3> : tensor<i32>
    %lt = stablehlo.compare LT, %i, %three : (tensor<i32>, tensor<i32>) -> tensor<i1>
    stablehlo.return %lt : tensor<i1>
  } do {
    %b = stablehlo.broadcast_in_dim %r, dims = [0, 1] : (tensor<1x4xf32>) -> tensor<8x4xf32>
    %s = stablehlo.sine %q : tensor<8x4xf32>
    %m = stablehlo.multiply %b, %s : tensor<8x4xf32>
    %one = stablehlo.constant dense<1> : tensor<i32>
    %j = stablehlo.add %i, %one : tensor<i32>
    stablehlo.return %j, %m : tensor<i32>, tensor<8x4xf32>
  }
  %dead = stablehlo.negate %x : tensor<8x4xf32>
  return %0#1 : tensor<8x4xf32>
}
"""
JAX_MAIN = ["stablehlo.reshape", "stablehlo.constant", "stablehlo.while", "stablehlo.negate",
            "func.return"]
JAX_BODY = ["stablehlo.broadcast_in_dim", "stablehlo.sine", "stablehlo.multiply",
            "stablehlo.constant", "stablehlo.add", "stablehlo.return"]


def _blocks(module: ir.Module) -> tuple[ir.Block, ir.Block]:
    main = module.body.operations[1]
    loop = next(op for op in main.regions[0].blocks[0].operations
                if op.operation.name == "stablehlo.while")
    return main.regions[0].blocks[0], loop.regions[1].blocks[0]


def _names(block: ir.Block) -> list[str]:
    # Shardy's import makes constants sdy.constant (its export gives them back).
    return [op.operation.name.replace("sdy.constant", "stablehlo.constant")
            for op in block.operations]


def test_blocks_are_put_in_hlo_post_order():
    module = ir.Module.parse(PROGRAM, make_context())
    with module.context:
        assert order_as_hlo(module.operation)
        main, body = _blocks(module)
        # The dead negate is a root of its own before the return; the loop reads its
        # counter's constant (an operand) before the reshape it captures.
        assert _names(main) == ["stablehlo.negate", "stablehlo.constant", "stablehlo.reshape",
                                "stablehlo.while", "func.return"]
        assert _names(body) == ["stablehlo.constant", "stablehlo.add",
                                "stablehlo.broadcast_in_dim", "stablehlo.sine",
                                "stablehlo.multiply", "stablehlo.return"]
        module.operation.verify()


def test_a_block_already_in_post_order_is_left_untagged():
    module = ir.Module.parse(PROGRAM, make_context())
    with module.context:
        order_as_hlo(module.operation)
        cond = _blocks(module)[1].owner.regions[0].blocks[0]
        assert not any(ORDER_ATTR in op.attributes for op in cond.operations)
        assert all(ORDER_ATTR in op.attributes for op in _blocks(module)[1].operations)
        restore_jax_order(module.operation)
        assert ORDER_ATTR not in str(module) and REORDERED_ATTR not in str(module)


def test_propagated_blocks_are_put_back_in_jax_order():
    # The pipeline adds ops (data-flow edges, reshards) and erases the dead negate: the
    # ops jax wrote come back in its order, the rest before their users.
    module = ir.Module.parse(PROGRAM, make_context())
    with module.context, ir.Location.unknown():
        order_as_hlo(module.operation)
        shardy_pipeline(module.operation)
        restore_jax_order(module.operation)
        module.operation.verify()
        main, body = _blocks(module)
        assert _names(main) == [name for name in JAX_MAIN if name != "stablehlo.negate"]
        assert _names(body) == JAX_BODY
        text = str(module)
        assert ORDER_ATTR not in text and REORDERED_ATTR not in text


def test_restoring_keeps_what_the_import_added_before_its_users():
    module = ir.Module.parse(PROGRAM, make_context())
    with module.context, ir.Location.unknown():
        order_as_hlo(module.operation)
        import_pipeline(module.operation)
        restore_jax_order(module.operation, keep_tags=True)
        module.operation.verify()
        main, _ = _blocks(module)
        names = [name for name in _names(main) if name != "sdy.data_flow_edge"]
        assert names == JAX_MAIN
        assert REORDERED_ATTR in module.operation.attributes


# A block as the export leaves it: the constant kept for two copies carries a
# later copy's place (7), after its first user's (2); an op the pipeline added
# (the untagged negate) reads the add.
TAGGED_RESTORE = """
func.func @main(%x: tensor<4xf32>) -> tensor<4xf32> {
  %n = stablehlo.negate %x {shardc.jax_order = 4 : i64} : tensor<4xf32>
  %c = sdy.constant {shardc.jax_order = 7 : i64} dense<1.0> : tensor<4xf32>
  %a = stablehlo.add %n, %c {shardc.jax_order = 2 : i64} : tensor<4xf32>
  %g = stablehlo.negate %a : tensor<4xf32>
  %m = stablehlo.multiply %g, %c {shardc.jax_order = 5 : i64} : tensor<4xf32>
  "func.return"(%m) {shardc.jax_order = 9 : i64} : (tensor<4xf32>) -> ()
}
"""


def test_restoring_puts_operands_before_users_whatever_their_places():
    # The negate (4) and the constant (7) go just before the add (2) that reads them,
    # the added negate just before its user, each copy of a tie in its users' order.
    module = ir.Module.parse(TAGGED_RESTORE, make_context())
    module.operation.attributes[REORDERED_ATTR] = ir.UnitAttr.get(module.context)
    with module.context:
        restore_jax_order(module.operation)
        module.operation.verify()
        ops = list(module.body.operations[0].regions[0].blocks[0].operations)
        assert [op.operation.name for op in ops] == [
            "stablehlo.negate", "sdy.constant", "stablehlo.add", "stablehlo.negate",
            "stablehlo.multiply", "func.return"]
        assert ops[0].operands[0] == module.body.operations[0].regions[0].blocks[0].arguments[0]
        assert ORDER_ATTR not in str(module)
