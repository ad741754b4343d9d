"""Export steps on small modules."""

from jaxlib.mlir import ir

from shardc.compiler.sharding import rules
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


IO_MODULE = """
sdy.mesh @mesh = <["x"=4]>
func.func @main(%arg0: tensor<8xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"x"}]>},
                %arg1: tensor<6xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"x"}]>},
                %arg2: tensor<8xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"x"}]>, jax.a = 1 : i32})
    -> (tensor<6xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"x"}]>}) {
  return %arg1 : tensor<6xf32>
}
"""


def test_indivisible_io_shardings_are_fixed_per_sharding_and_type():
    # One sharding on arguments of different sizes: the fix depends on the type too.
    module = ir.Module.parse(IO_MODULE, make_context())
    export_steps.update_non_divisible_io_shardings(module.operation)
    main = module.body.operations[1]
    args = [str(a) for a in ir.ArrayAttr(main.attributes["arg_attrs"])]
    assert args == [
        '{sdy.sharding = #sdy.sharding<@mesh, [{"x"}]>}',
        '{sdy.sharding = #sdy.sharding<@mesh, [{"x":(1)2}]>}',
        '{jax.a = 1 : i32, sdy.sharding = #sdy.sharding<@mesh, [{"x"}]>}',
    ]
    results = [str(a) for a in ir.ArrayAttr(main.attributes["res_attrs"])]
    assert results == ['{sdy.sharding = #sdy.sharding<@mesh, [{"x":(1)2}]>}']


COPIES = """
func.func @main() -> (tensor<2xcomplex<f32>>, tensor<2xcomplex<f32>>, tensor<2xcomplex<f32>>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>) {
  %0 = stablehlo.constant dense<[(1.0, 2.0), (3.0, 4.0)]> : tensor<2xcomplex<f32>>
  %1 = stablehlo.constant dense<[(1.0, 2.0), (3.0, 4.0)]> : tensor<2xcomplex<f32>>
  %2 = stablehlo.constant dense<[(1.0, 2.0), (3.0, 5.0)]> : tensor<2xcomplex<f32>>
  %3 = sdy.constant {NAME = 1 : i64} dense<1.0> : tensor<4xf32>
  %4 = sdy.constant {NAME = 2 : i64} dense<1.0> : tensor<4xf32>
  %5 = sdy.constant {other = 2 : i64} dense<1.0> : tensor<4xf32>
  return %0, %1, %2, %3, %4, %5 : tensor<2xcomplex<f32>>, tensor<2xcomplex<f32>>, tensor<2xcomplex<f32>>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>
}
"""


def test_merger_merges_equal_copies_complex_ones_and_bookkeeping_apart_too():
    # Complex values are compared by their printed form (the bindings cannot read
    # them); the search's op numbers do not keep copies apart.
    text = COPIES.replace("NAME", f'"{rules._BOOKKEEPING_PREFIX}op"')
    module = ir.Module.parse(text, make_context())
    with module.context:
        erased = export_steps.constant_or_scalar_merger(module.operation)
    assert len(erased) == 2
    returned = [value.get_name() for value in
                list(module.body.operations[0].regions[0].blocks[0].operations)[-1].operands]
    assert returned[0] == returned[1] != returned[2]
    assert returned[3] == returned[4] != returned[5]


GROUPED = """
sdy.mesh @mesh = <["x"=4]>
func.func @main(%arg0: tensor<8xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"x"}]>})
    -> tensor<8xf32> {
  %0 = stablehlo.iota dim = 0 {sdy.sharding = #sdy.sharding_per_value<[<@mesh, [{"x", ?}]>]>} : tensor<8xf32>
  sdy.sharding_group %arg0 group_id=0 : tensor<8xf32>
  sdy.sharding_group %0 group_id=0 : tensor<8xf32>
  %1 = stablehlo.add %arg0, %0 : tensor<8xf32>
  return %1 : tensor<8xf32>
}
"""


def test_removing_sharding_groups_pins_their_constants_only():
    # XLA drops the shardings of constant expressions: the iota's group sharding
    # is kept as a closed constraint; the argument needs none.
    module = ir.Module.parse(GROUPED, make_context())
    export_steps.remove_sharding_groups(module.operation)
    text = str(module)
    assert "sdy.sharding_group" not in text
    assert text.count("sdy.sharding_constraint") == 1
    assert '%1 = sdy.sharding_constraint %0 <@mesh, [{"x"}]>' in text
    assert "stablehlo.add %arg0, %1" in text
