"""Import steps on small modules."""

from jaxlib.mlir import ir

from shardc.compiler.stages import import_steps
from shardc.dialects import make_context

SHARED_CONSTANT = """
func.func @main(%arg0: tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>) {
  %c = stablehlo.constant dense<1.0> : tensor<4xf32>
  %n = stablehlo.negate %c : tensor<4xf32>
  sdy.sharding_group %n group_id = 7 : tensor<4xf32>
  %0 = stablehlo.add %arg0, %n : tensor<4xf32>
  %1 = stablehlo.multiply %arg0, %n : tensor<4xf32>
  %2 = stablehlo.subtract %n, %arg0 : tensor<4xf32>
  return %0, %1, %2 : tensor<4xf32>, tensor<4xf32>, tensor<4xf32>
}
"""


def test_every_use_of_a_grouped_constant_gets_its_own_copy_in_the_group():
    # A value's sharding groups are looked up once and reused for each of its copies.
    module = ir.Module.parse(SHARED_CONSTANT, make_context())
    import_steps.constant_or_scalar_splitter(module.operation)
    main = module.body.operations[0]
    ops = list(main.regions[0].blocks[0].operations)
    names = [op.name for op in ops]
    assert names.count("sdy.constant") == 3 and names.count("stablehlo.negate") == 3
    groups = [op for op in ops if op.name == "sdy.sharding_group"]
    assert len(groups) == 3
    # Each group holds a different copy, and each copy has one user besides its group.
    grouped = [group.operands[0] for group in groups]
    assert len({value.get_name() for value in grouped}) == 3
    for value in grouped:
        users = [use.owner.name for use in value.uses]
        assert sorted(users)[0] == "sdy.sharding_group" and len(users) == 2


def test_the_splitter_returns_the_names_of_the_ops_it_met():
    module = ir.Module.parse(SHARED_CONSTANT, make_context())
    found = import_steps.constant_or_scalar_splitter(module.operation)
    assert found.names == {"func.func", "stablehlo.constant", "sdy.constant", "stablehlo.negate",
                           "sdy.sharding_group", "stablehlo.add", "stablehlo.multiply",
                           "stablehlo.subtract", "func.return"}
