"""The sharding walker: every sharding visited in Shardy's order, each distinct one mapped once."""

from __future__ import annotations

import pytest
from jaxlib.mlir import ir

from shardc.compiler.sharding import walker
from shardc.dialects import make_context, sdy

MODULE = """
sdy.mesh @mesh = <["x"=2, "y"=2]>
func.func @main(%arg0: tensor<8x8xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"x"}, {}]>})
    -> (tensor<8x8xf32> {sdy.sharding = #sdy.sharding<@mesh, [{}, {"y"}]>}) {
  %0 = stablehlo.add %arg0, %arg0 {sdy.sharding = #sdy.sharding_per_value<[<@mesh, [{"x"}, {}]>]>} : tensor<8x8xf32>
  %1 = stablehlo.multiply %0, %0 {sdy.sharding = #sdy.sharding_per_value<[<@mesh, [{"x"}, {}]>]>} : tensor<8x8xf32>
  %2 = sdy.sharding_constraint %1 <@mesh, [{}, {"y"}]> : tensor<8x8xf32>
  %3 = stablehlo.negate %2 {other = "x"} : tensor<8x8xf32>
  %4 = stablehlo.abs %3 {sdy.sharding = #sdy.sharding_per_value<[<@mesh, [{"y"}, {}]>]>} : tensor<8x8xf32>
  return %4 : tensor<8x8xf32>
}
"""


def _parse() -> ir.Module:
    return ir.Module.parse(MODULE, make_context())


def test_ops_in_preorder_leaves_out_the_root() -> None:
    module = _parse()
    names = [op.name for op in walker.ops_in_preorder(module.operation)]
    assert names[:3] == ["sdy.mesh", "func.func", "stablehlo.add"]
    assert "builtin.module" not in names and len(names) == 8


def test_sharding_attr_names_of_plain_and_sdy_ops() -> None:
    ops = {op.name: op for op in walker.ops_in_preorder(_parse().operation)}
    assert walker.sharding_attr_names(ops["stablehlo.add"]) == ["sdy.sharding"]
    assert walker.sharding_attr_names(ops["stablehlo.negate"]) == []
    assert walker.sharding_attr_names(ops["sdy.sharding_constraint"]) == ["sharding"]


def test_map_shardings_maps_each_distinct_sharding_once_in_first_seen_order() -> None:
    module = _parse()
    seen: list[str] = []

    def close(sharding: sdy.TensorShardingAttr) -> ir.Attribute:
        seen.append(str(sharding))
        dims = [sdy.DimensionShardingAttr(d) for d in sharding.dimension_shardings]
        dims = [sdy.DimensionShardingAttr.get(list(d.axes), True, d.priority) for d in dims]
        return sdy.TensorShardingAttr.get(sharding.mesh_or_ref, dims, [], [])

    with module.context:
        walker.map_shardings(module.operation, close)
    assert seen == ['#sdy.sharding<@mesh, [{"x"}, {}]>', '#sdy.sharding<@mesh, [{}, {"y"}]>',
                    '#sdy.sharding<@mesh, [{"y"}, {}]>']
    text = str(module)
    assert "?" not in text
    # Every occurrence is rewritten, the shared ones included.
    assert text.count('<@mesh, [{"x"}, {}]>') == 3 and text.count('<@mesh, [{}, {"y"}]>') == 2


def test_map_shardings_leaves_unchanged_attributes_alone() -> None:
    module = _parse()
    before = str(module)
    with module.context:
        walker.map_shardings(module.operation, lambda sharding: sharding)
    assert str(module) == before


def test_attribute_names_and_dict_of_a_constant_the_bindings_cannot_read() -> None:
    module = ir.Module.parse("""
    func.func @f() -> tensor<2xcomplex<f32>> {
      %0 = stablehlo.constant dense<[(1.0, 2.0), (3.0, 4.0)]> : tensor<2xcomplex<f32>>
      return %0 : tensor<2xcomplex<f32>>
    }""", make_context())
    constant = next(op for op in walker.ops_in_preorder(module.operation)
                    if op.name == "stablehlo.constant")
    assert walker.attribute_names(constant) == ["value"]
    assert walker.attribute_dict(constant) is None
    add = next(op for op in walker.ops_in_preorder(_parse().operation) if op.name == "stablehlo.add")
    assert list(walker.attribute_dict(add)) == ["sdy.sharding"]


def test_map_shardings_rewrites_func_argument_and_result_shardings() -> None:
    module = _parse()
    with module.context:
        walker.map_shardings(module.operation, lambda sharding: sdy.TensorShardingAttr.get(
            sharding.mesh_or_ref, sharding.dimension_shardings, [], [sdy.AxisRefAttr.get("y")]
            if "x" in str(sharding) else []))
    func = next(op for op in walker.ops_in_preorder(module.operation) if op.name == "func.func")
    arg, res = str(func.attributes["arg_attrs"]), str(func.attributes["res_attrs"])
    assert 'unreduced={"y"}' in arg and "unreduced" not in res


@pytest.mark.parametrize("order", [ir.WalkOrder.PRE_ORDER, ir.WalkOrder.POST_ORDER])
def test_nested_ops_are_every_nested_op_in_walk_order_without_the_root(order) -> None:
    module = ir.Module.parse("""
    func.func @f(%arg0: tensor<4xf32>) -> tensor<4xf32> {
      %0 = stablehlo.abs %arg0 : tensor<4xf32>
      return %0 : tensor<4xf32>
    }""", make_context())
    func = module.body.operations[0].operation
    for root in (module.operation, func):
        walked: list[ir.Operation] = []
        root.walk(lambda op: (walked.append(op), ir.WalkResult.ADVANCE)[1], order)
        assert walker.nested_ops(root, order) == [op for op in walked if op != root]
        named = {"func.func", "stablehlo.abs"}
        assert walker.nested_ops(root, order, named) == [
            op for op in walked if op != root and op.name in named]


def test_census_names_every_op_and_finds_an_attribute() -> None:
    found = walker.census(_parse().operation, "other")
    assert found.names == {"builtin.module", "sdy.mesh", "func.func", "stablehlo.add",
                           "stablehlo.multiply", "sdy.sharding_constraint", "stablehlo.negate",
                           "stablehlo.abs", "func.return"}
    assert found.has_attribute
    assert not walker.census(_parse().operation, "sdy.sharding_rule").has_attribute
    assert not walker.census(_parse().operation).has_attribute


def test_nested_ops_by_name_leave_out_the_root_only_when_named() -> None:
    module = _parse().operation
    func = walker.nested_ops(module, names={"func.func"})[0]
    assert walker.nested_ops(func, names={"func.func"}) == []
    adds = walker.nested_ops(module, ir.WalkOrder.POST_ORDER, {"stablehlo.add", "stablehlo.abs"})
    assert [op.name for op in adds] == ["stablehlo.add", "stablehlo.abs"]
