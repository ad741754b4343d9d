"""``SharedRead``: one read of a module propagated from many starting shardings.

Each propagation on the shared read must give exactly what propagating a copy
of the module carrying those shardings gives (the cost-aware search's copies
with pins): the same store, and once moved to that copy's graph, the same
module written back.
"""

from __future__ import annotations

import random

import pytest
from differential.shared_reads import (
    generated_reads,
    mesh_axes,
    random_start,
    startable_ops,
)
from jaxlib.mlir import ir

from shardc.compiler.propagation import SharedRead, propagate_read
from shardc.compiler.propagation.graph import PropagationGraph
from shardc.dialects import make_context
from shardc.dialects.sdy import SHARDING_ATTR


def _ops(module: ir.Operation) -> list[ir.Operation]:
    """The module's ops in the graph's order (pre-order, the module itself left out)."""
    ops: list[ir.Operation] = []
    module.walk(lambda op: ops.append(op) or ir.WalkResult.ADVANCE, ir.WalkOrder.PRE_ORDER)
    return ops[1:]


def _copy_with(module: ir.Operation, starts: dict[int, ir.Attribute]) -> ir.Operation:
    copy = module.clone()
    ops = _ops(copy)
    for op, attribute in starts.items():
        ops[op].attributes[SHARDING_ATTR] = attribute
    return copy


@pytest.mark.filterwarnings("ignore")
@pytest.mark.parametrize("plan", ["basic", "user-priority"])
def test_propagations_on_a_shared_read_are_those_of_copies(plan):
    context = make_context()
    checked = unusable = 0
    for seed, text, module, read in generated_reads(context):
        if not read.usable:
            unusable += 1
            continue
        rng = random.Random(seed)
        mesh = mesh_axes(text)
        startable = startable_ops(read)
        # The module as it is first (the first run's plans are reused by the others).
        candidates = [{}]
        for _ in range(4):
            chosen = rng.sample(startable, min(len(startable), rng.randint(1, 2)))
            candidates.append({op: random_start(rng, read, mesh, op, context) for op in chosen})
        for starts in candidates:
            store = read.propagate(plan, starts)
            copy = _copy_with(module.operation, starts)
            graph, expected = propagate_read(copy, plan=plan, memo=read.graph.memo,
                                             write=False)
            assert store.value == expected.value, (seed, starts)
            assert store.sid == expected.sid and store.dirty == expected.dirty, (seed, starts)
            # Moved to the copy's graph, the store writes what the copy's propagation does.
            written = _copy_with(module.operation, starts)
            store.moved_to(PropagationGraph(written, memo=read.graph.memo))
            store.write_back(keep_rules=False)
            expected.write_back(keep_rules=False)
            assert str(written) == str(copy), (seed, starts)
            checked += 1
        assert read.runs == len(candidates)
    assert checked >= 40 * 5 and unusable


_DEAD = """
sdy.mesh @mesh = <["x"=2]>
func.func @main(%arg0: tensor<8xf32>) -> tensor<8xf32> {
  %0 = stablehlo.negate %arg0 : tensor<8xf32>
  %1 = stablehlo.add %arg0, %arg0 : tensor<8xf32>
  return %1 : tensor<8xf32>
}
"""

_GROUP = """
sdy.mesh @mesh = <["x"=2]>
func.func @main(%arg0: tensor<8xf32>, %arg1: tensor<8xf32>) -> tensor<8xf32> {
  sdy.sharding_group %arg0 group_id=0 : tensor<8xf32>
  sdy.sharding_group %arg1 group_id=0 : tensor<8xf32>
  %0 = stablehlo.add %arg0, %arg1 : tensor<8xf32>
  return %0 : tensor<8xf32>
}
"""


@pytest.mark.parametrize("text", [_DEAD, _GROUP], ids=["dead_op", "sharding_group"])
def test_a_module_whose_propagation_changes_its_graph_is_not_shared(text):
    """An erased dead op, or constraints a group conflict inserts, would change the
    graph that later propagations start from."""
    read = SharedRead(ir.Module.parse(text, make_context()).operation)
    assert not read.usable
    with pytest.raises(ValueError):
        read.propagate("basic", {})


def test_a_start_not_read_from_the_ops_own_sharding_is_refused():
    """A constraint's sharding is its own attribute, not ``sdy.sharding``: a start on
    it cannot stand for a copy carrying it, and the store is left as read."""
    context = make_context()
    module = ir.Module.parse("""
sdy.mesh @mesh = <["x"=2]>
func.func @main(%arg0: tensor<8xf32>) -> tensor<8xf32> {
  %0 = sdy.sharding_constraint %arg0 <@mesh, [{"x"}]> : tensor<8xf32>
  %1 = stablehlo.negate %0 : tensor<8xf32>
  return %1 : tensor<8xf32>
}
""", context)
    read = SharedRead(module.operation)
    attribute = ir.Attribute.parse('#sdy.sharding_per_value<[<@mesh, [{}]>]>', context)
    constraint = read.graph.op_name.index("sdy.sharding_constraint")
    negate = read.graph.op_name.index("stablehlo.negate")
    assert read.propagate("basic", {constraint: attribute}) is None
    assert read.propagate("basic", {negate: attribute}) is not None
    assert read.store.dirty == set() and read.runs == 1


_GRAPH_FIELDS = ("op_name", "op_parent", "op_operands", "op_results", "op_blocks",
                 "op_terminator", "erased", "value_def", "value_owner", "value_arg_index",
                 "value_shape", "value_type_key", "uses", "dynamic_values")


def _assert_walked(graph: PropagationGraph, module: ir.Operation) -> None:
    walked = PropagationGraph(module)
    for field in _GRAPH_FIELDS:
        assert getattr(graph, field) == getattr(walked, field), field
    assert list(map(hash, graph.ops)) == list(map(hash, walked.ops))
    assert list(map(hash, graph.values)) == list(map(hash, walked.values))


@pytest.mark.filterwarnings("ignore")
def test_a_clones_graph_taken_from_another_clones_is_the_graph_a_walk_reads():
    """``PropagationGraph.of_clone`` (a copy the cost-aware search writes back, its shared
    read of the module): taken from the graph of another clone of the same module, every
    op and value (nested bodies included), their numbering and uses in use-list order,
    are those a walk reads; a module laid out otherwise is walked."""
    context = make_context()
    taken = walked = 0
    previous = None
    for _, _, module, read in generated_reads(context):
        clone = module.operation.clone()
        graph = PropagationGraph.of_clone(clone, read.graph)
        _assert_walked(graph, clone)
        taken += graph.op_name is read.graph.op_name
        if previous is not None and previous.op_name != read.graph.op_name:
            other = PropagationGraph.of_clone(clone, previous)  # another program's graph
            _assert_walked(other, clone)
            walked += other.op_name is not previous.op_name
        previous = read.graph
    assert taken > 10 and walked > 10
