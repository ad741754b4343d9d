"""The Python API of sharding origins: ``propagate(..., record_origins=True)``."""

from __future__ import annotations

from jaxlib.mlir import ir

from shardc.compiler.propagation import propagate
from shardc.dialects import make_context

PROGRAM = """
sdy.mesh @mesh = <["a"=2, "b"=2]>
func.func @main(%arg0: tensor<8x8xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"a"}, {?}]>},
                %arg1: tensor<8x8xf32>)
    -> (tensor<8x8xf32> {sdy.sharding = #sdy.sharding<@mesh, [{?}, {"b"}]>}) {
  %0 = stablehlo.add %arg0, %arg1 : tensor<8x8xf32>
  %1 = sdy.sharding_constraint %0 <@mesh, [{?}, {?}]> : tensor<8x8xf32>
  %2:2 = stablehlo.optimization_barrier %1, %arg1 : tensor<8x8xf32>, tensor<8x8xf32>
  %3 = stablehlo.multiply %2#0, %2#1 : tensor<8x8xf32>
  return %3 : tensor<8x8xf32>
}
"""


def _module():
    return ir.Module.parse(PROGRAM, make_context())


def test_record_origins_maps_values_to_user_shardings():
    module = _module()
    origins = propagate(module.operation, plan="basic", record_origins=True)
    assert origins.args == {0: {"a": "self"}, 1: {"a": ("input", 0)}}
    assert origins.results == {0: {"b": "self"}}
    ops = {op.operation.name: op for op in module.body.operations[1].regions[0].blocks[0]}
    assert origins.of_op(ops["stablehlo.add"]) == {"a": ("input", 0)}
    assert origins.of_op(ops["sdy.sharding_constraint"]) == {"a": ("input", 0)}
    assert origins.of_op(ops["stablehlo.optimization_barrier"], 1) == {"b": ("output", 0)}
    assert origins.of_op(ops["stablehlo.multiply"]) == {"b": ("output", 0)}
    # Recording alone writes no attribute.
    assert "sharding_origins" not in str(module)


def test_recording_leaves_shardings_unchanged():
    for strategy in ("basic", "aggressive", "op-priority", "user-priority"):
        plain, recorded = _module(), _module()
        assert propagate(plain.operation, plan=strategy) is None
        propagate(recorded.operation, plan=strategy, record_origins=True)
        assert str(plain) == str(recorded)


def test_attributes_and_api_agree():
    module = _module()
    origins = propagate(module.operation, plan="op-priority", record_origins=True,
                        debug_sharding_origins=True)
    text = str(module)
    assert 'sdy.sharding_origins = {a = "self"}' in text
    assert 'sdy.sharding_origin_name = "constraint_0"' in text
    assert 'sdy.sharding_origins = [{b = "output: 0"}, {b = "output: 0"}]' in text
    assert origins.args[1] == {"a": ("input", 0)}
