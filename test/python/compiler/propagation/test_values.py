"""``ModuleValues.propagated``: reading the propagation's own graph and store."""

import pytest
from jaxlib.mlir import ir

from bench import e2e_measure
from bench.models import REGISTRY
from shardc.compiler.cost_aware.explicit import signatures
from shardc.compiler.cost_aware.pricing import price
from shardc.compiler.propagation.values import ModuleValues
from shardc.compiler.stages import import_pipeline
from shardc.dialects import make_context

_DEAD_ADD = """
sdy.mesh @mesh = <["x"=2, "y"=2]>
func.func @main(%arg0: tensor<8x8xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"x"}, {}]>})
    -> tensor<8x8xf32> {
  %0 = stablehlo.add %arg0, %arg0 : tensor<8x8xf32>
  %1 = stablehlo.multiply %arg0, %arg0 : tensor<8x8xf32>
  return %1 : tensor<8x8xf32>
}
"""


def _observed(reader: ModuleValues) -> tuple:
    """Everything the cost model reads of a module, in a comparable form."""
    graph, store = reader.graph, reader.store
    live = [op for op in range(len(graph.ops)) if not graph.erased[op]]
    return ([graph.op_name[op] for op in live],
            [reader.tensor(v) for v in range(len(graph.values))],
            {op: [store.value[slot] for slot in slots]
             for op, slots in store.func_results.items()},
            sorted(store.manual.items()),
            signatures(reader), price(reader))


def _imported(name: str) -> ir.Module:
    program = REGISTRY[name]("small")
    jitted, args, _ = e2e_measure.prepare(program, "shardc")
    module = ir.Module.parse(jitted.lower(*args, propagate=False).as_text(), make_context())
    with module.context:
        import_pipeline(module.operation)
    return module


@pytest.mark.parametrize("make", [
    lambda: _imported("conflict_mlp"),
    lambda: _imported("shard_map_pipeline"),  # manual computations: read again
    lambda: ir.Module.parse(_DEAD_ADD, make_context()),  # an erased op: read again
], ids=["conflict_mlp", "shard_map_pipeline", "dead_add"])
def test_propagated_reads_what_reading_the_module_again_reads(make):
    module = make()
    with module.context:
        reader = ModuleValues.propagated(module.operation, plan="user-priority",
                                         conservative=False, missing_as_replicated=True)
    again = ModuleValues(module.operation, missing_as_replicated=True)
    assert not any(reader.graph.erased)
    assert _observed(reader) == _observed(again)
