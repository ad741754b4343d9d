"""The export stage's census taken from the propagation's read finds what its walk finds."""

import pytest
from jaxlib.mlir import ir

from bench import e2e_measure, zoo
from bench.models import REGISTRY
from shardc.compiler import stages
from shardc.compiler.propagation import propagate_read
from shardc.compiler.stages import PropagatedRead, import_pipeline
from shardc.dialects import make_context

# A loop (data-flow edges), constants the merger sees, a dead op, a zero-result op
# with a sharding, a sharding the propagation writes and one it reads.
LOOP = """
sdy.mesh @mesh = <["x"=2, "y"=2]>
func.func @main(%arg0: tensor<8x8xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"x"}, {}]>},
                %arg1: tensor<8x8xf32>) -> (tensor<8x8xf32>, tensor<8x8xf32>) {
  %c = stablehlo.constant dense<0> : tensor<i32>
  %c1 = stablehlo.constant dense<1> : tensor<i32>
  %c2 = stablehlo.constant dense<1> : tensor<i32>
  %dead = stablehlo.negate %arg1 : tensor<8x8xf32>
  %w:2 = stablehlo.while(%i = %c, %x = %arg0) : tensor<i32>, tensor<8x8xf32>
    cond {
      %lt = stablehlo.compare LT, %i, %c1 : (tensor<i32>, tensor<i32>) -> tensor<i1>
      stablehlo.return %lt : tensor<i1>
    } do {
      %n = stablehlo.add %i, %c2 : tensor<i32>
      %y = stablehlo.add %x, %x : tensor<8x8xf32>
      stablehlo.return %n, %y : tensor<i32>, tensor<8x8xf32>
    }
  %b = stablehlo.add %w#1, %arg1 {sdy.sharding = #sdy.sharding_per_value<[<@mesh, [{?}, {"y", ?}]>]>} : tensor<8x8xf32>
  stablehlo.custom_call @sink(%b) {has_side_effect = true, sdy.sharding = #sdy.sharding_per_value<[]>} : (tensor<8x8xf32>) -> ()
  return %b, %w#1 : tensor<8x8xf32>, tensor<8x8xf32>
}
"""


def _comparable(found) -> tuple:
    """A census with ops by identity (their hashes) and unordered where order is free."""
    ops = lambda listed: [hash(op) for op in listed]  # noqa: E731
    return (found.census.names, ops(found.copies), found.complete, ops(found.funcs),
            sorted((hash(op), str(attr)) for op, attr in found.sharded),
            sorted(ops(found.reread)), found.unused)


def _assert_same_census(module: ir.Module, keep_constraints: bool) -> None:
    operation = module.operation
    with operation.context:
        import_pipeline(operation)
        graph, store = propagate_read(operation, plan="user-priority")
        walked = stages._export_census(operation, keep_constraints)
        read = stages._export_census_of_read(operation, PropagatedRead(graph, store, False),
                                             keep_constraints)
    assert _comparable(read) == _comparable(walked)
    # Rules were dropped at write-back but custom ones, which no export step drops.
    assert not read.census.has_attribute


@pytest.mark.parametrize("keep_constraints", [False, True])
def test_census_of_read_equals_walk(keep_constraints):
    _assert_same_census(ir.Module.parse(LOOP, make_context()), keep_constraints)


@pytest.mark.parametrize("name", ["lm_linen", "grad_loops", "pipeline_shard_map",
                                  "dropout_cond", "moe_routing", "scan_rnn"])
def test_census_of_read_equals_walk_on_programs(name):
    program = {**zoo.REGISTRY, **REGISTRY}[name]("small")
    jitted, args, _ = e2e_measure.prepare(program, "shardc")
    text = jitted.lower(*args, propagate=False).as_text()
    _assert_same_census(ir.Module.parse(text, make_context()), keep_constraints=True)


# Function boundaries the propagation reads (an indivisible dim, an open dim with a
# sub-axis) and writes (the result, which takes both from the argument).
IO = """
sdy.mesh @mesh = <["x"=4, "y"=4]>
func.func @main(%arg0: tensor<6x8xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"x"}, {"y":(1)2, ?}]>})
    -> tensor<6x8xf32> {
  %0 = stablehlo.negate %arg0 : tensor<6x8xf32>
  return %0 : tensor<6x8xf32>
}
"""


@pytest.mark.parametrize("text", [IO, LOOP])
def test_export_with_the_read_fixes_io_shardings_as_parsing_them_does(text):
    module = ir.Module.parse(text, make_context())
    operation = module.operation
    with operation.context:
        import_pipeline(operation)
        graph, store = propagate_read(operation, plan="user-priority")
        written = str(operation)
        unread = ir.Module.parse(written)
        stages.export_pipeline(operation, keep_constraints=True,
                               read=PropagatedRead(graph, store, False))
        stages.export_pipeline(unread.operation, keep_constraints=True)
    assert str(operation) == str(unread)
    if text is IO:
        # The propagation wrote the result's sharding (open dims); the export cut
        # both to what divides, then dropped the sub-axes of open dims.
        assert '-> (tensor<6x8xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"x", ?}' in written
        assert ('%arg0: tensor<6x8xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"x":(1)2}, {}]>}'
                in str(operation))
        assert '-> (tensor<6x8xf32> {sdy.sharding = #sdy.sharding<@mesh, [{}, {}]>})' in str(operation)
