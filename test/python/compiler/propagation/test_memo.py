"""The exactness assumptions behind the driver's memos (see driver.py, directions.py).

* ``DirectionChain.for_op`` level k equals ``union_of(heuristics[:k+1])``;
* ops with equal ``op_priority_signature`` get equal directions at every level;
* a propagation run twice on fresh parses prints the same module, and the
  memoised run equals a run with the step and func-result memos disabled and
  with no step skipped as settled (``ShardingStore.settled``).
"""

from __future__ import annotations

import pytest
from jaxlib.mlir import ir

from shardc.compiler.propagation import propagate
from shardc.compiler.propagation.directions import (
    OP_PRIORITY_CHAIN,
    OP_PRIORITY_HEURISTICS,
    op_priority_signature,
    union_of,
)
from shardc.compiler.propagation.driver import Driver
from shardc.compiler.propagation.graph import PropagationGraph
from shardc.compiler.sharding.rules import clear_cache, rule_for
from shardc.dialects import make_context

PROGRAM = """
sdy.mesh @mesh = <["a"=2, "b"=4]>
func.func @main(%arg0: tensor<8x16xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"a"}, {?}]>},
                %arg1: tensor<16x32xf32> {sdy.sharding = #sdy.sharding<@mesh, [{?}, {"b"}p1]>},
                %arg2: tensor<32xf32>) -> tensor<8x32xf32> {
  %0 = stablehlo.dot_general %arg0, %arg1, contracting_dims = [1] x [0]
       : (tensor<8x16xf32>, tensor<16x32xf32>) -> tensor<8x32xf32>
  %1 = stablehlo.broadcast_in_dim %arg2, dims = [1] : (tensor<32xf32>) -> tensor<8x32xf32>
  %2 = stablehlo.add %0, %1 : tensor<8x32xf32>
  %3 = stablehlo.multiply %2, %2 : tensor<8x32xf32>
  %4 = stablehlo.transpose %3, dims = [1, 0] : (tensor<8x32xf32>) -> tensor<32x8xf32>
  %5 = stablehlo.reshape %4 : (tensor<32x8xf32>) -> tensor<256xf32>
  %6 = stablehlo.reshape %5 : (tensor<256xf32>) -> tensor<8x32xf32>
  %7 = stablehlo.add %6, %3 : tensor<8x32xf32>
  %8 = stablehlo.negate %7 : tensor<8x32xf32>
  %9 = stablehlo.add %8, %2 : tensor<8x32xf32>
  return %9 : tensor<8x32xf32>
}
"""


def _graph() -> PropagationGraph:
    module = ir.Module.parse(PROGRAM, make_context())
    graph = PropagationGraph(module.operation)
    graph._module_ref = module  # keep the IR alive with the graph
    for op in range(len(graph.ops)):
        graph.rule(op)
    return graph


def test_chain_levels_equal_unions():
    graph = _graph()
    for op in range(len(graph.ops)):
        rule = graph.cached_rule(op)
        if rule is None:
            continue
        factors = range(len(rule.factor_sizes))
        levels = OP_PRIORITY_CHAIN.for_op(graph, op, len(factors))
        for k, level in enumerate(levels):
            union = union_of(OP_PRIORITY_HEURISTICS[: k + 1])
            assert list(level) == union.for_factors(graph, op, factors)
            assert list(level) == [union(graph, op, f) for f in factors]


def test_equal_signatures_give_equal_directions():
    graph = _graph()
    seen: dict = {}
    for op in range(len(graph.ops)):
        rule = graph.cached_rule(op)
        if rule is None:
            continue
        key = (op_priority_signature(graph, op), len(rule.factor_sizes))
        levels = OP_PRIORITY_CHAIN.for_op(graph, op, len(rule.factor_sizes))
        assert seen.setdefault(key, levels) == levels


# Several results of one shape and sharding: the func-result step's memo answers
# the later ones (and every later round) from the first.
MANY_RESULTS = """
sdy.mesh @mesh = <["a"=2, "b"=4]>
func.func @main(%arg0: tensor<8x16xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"a"}, {?}]>},
                %arg1: tensor<8x16xf32>)
    -> (tensor<8x16xf32>, tensor<8x16xf32> {sdy.sharding = #sdy.sharding<@mesh, [{}, {"b"}]>},
        tensor<8x16xf32>, tensor<8x16xf32> {sdy.sharding = #sdy.sharding<@mesh, [{?}, {"b"}]>}) {
  %0 = stablehlo.add %arg0, %arg1 : tensor<8x16xf32>
  %1 = stablehlo.negate %0 : tensor<8x16xf32>
  %2 = stablehlo.multiply %1, %arg1 : tensor<8x16xf32>
  return %0, %1, %2, %arg1 : tensor<8x16xf32>, tensor<8x16xf32>, tensor<8x16xf32>, tensor<8x16xf32>
}
"""


# A conflict basic propagation leaves alone and aggressive propagation resolves:
# under basic-then-aggressive, the dot's step writes nothing in the basic run
# and must still be taken in the aggressive one (same directions, new strategy).
DOT_CONFLICT = """
sdy.mesh @mesh = <["a"=2, "b"=2]>
func.func @main(%arg0: tensor<8x16xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"a"}, {}]>},
                %arg1: tensor<16x32xf32> {sdy.sharding = #sdy.sharding<@mesh, [{}, {"a"}]>})
    -> tensor<8x32xf32> {
  %0 = stablehlo.dot_general %arg0, %arg1, contracting_dims = [1] x [0]
       : (tensor<8x16xf32>, tensor<16x32xf32>) -> tensor<8x32xf32>
  return %0 : tensor<8x32xf32>
}
"""


@pytest.mark.parametrize(("program", "plan"), [
    (PROGRAM, "user-priority"),
    (MANY_RESULTS, "user-priority"),
    (DOT_CONFLICT, "basic-then-aggressive"),
], ids=["one_result", "many_results", "strategy_change"])
def test_memo_off_gives_the_same_module(monkeypatch, program, plan):
    def run() -> str:
        module = ir.Module.parse(program, make_context())
        propagate(module.operation, plan=plan)
        return str(module)

    memoised = run()
    assert run() == memoised

    class NoMemo(dict):
        def get(self, key, default=None):
            return default

    original = Driver.__init__

    def init(self, *args, **kwargs):
        original(self, *args, **kwargs)
        self._memo = _NoMemoByStrategy(NoMemo)
        self._result_memo = _NoMemoByStrategy(NoMemo)
        self.store.settled = NeverSettled(self.store.settled)

    class NeverSettled(list):
        def __getitem__(self, op):
            return -1

    class _NoMemoByStrategy(dict):
        def __init__(self, factory):
            super().__init__()
            self.factory = factory

        def setdefault(self, key, default=None):
            return self.factory()

    monkeypatch.setattr(Driver, "__init__", init)
    assert run() == memoised


# PROGRAM on a mesh of other axis sizes under the same name: not the same steps.
OTHER_MESH = PROGRAM.replace('<["a"=2, "b"=4]>', '<["a"=4, "b"=2]>')


def test_a_module_of_another_context_replays_the_steps(monkeypatch):
    """Every read of modules with the same meshes shares one step memo: the same program
    parsed again (a new context, as every lowering has) computes no step and prints
    what the first propagation printed; another mesh under the same name gets a memo
    of its own."""
    computed = []
    original = Driver._step

    def step(self, *args, **kwargs):
        computed.append(args)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(Driver, "_step", step)

    def run(program: str) -> str:
        module = ir.Module.parse(program, make_context())
        propagate(module.operation, plan="user-priority")
        return str(module)

    first = run(PROGRAM)
    computed.clear()
    assert run(PROGRAM) == first
    assert not computed
    other = run(OTHER_MESH)
    assert computed
    computed.clear()
    assert run(OTHER_MESH) == other
    assert not computed


def test_basic_then_aggressive_resolves_the_conflict():
    module = ir.Module.parse(DOT_CONFLICT, make_context())
    propagate(module.operation, plan="basic-then-aggressive")
    assert '[<@mesh, [{?}, {"a", ?}]>]' in str(module)


def test_rule_memo_ignores_shardcs_bookkeeping_attributes():
    """Ops that differ only in shardc's own attributes (the cost-aware search numbers
    every op) share one memoised rule: a key holding the number missed on every op."""
    text = """
    func.func @main(%arg0: tensor<8x32xf32>) -> tensor<8x32xf32> {
      %0 = stablehlo.add %arg0, %arg0 {shardc.cost_aware_id = 0 : i32} : tensor<8x32xf32>
      %1 = stablehlo.add %0, %0 {shardc.cost_aware_id = 1 : i32} : tensor<8x32xf32>
      return %1 : tensor<8x32xf32>
    }"""
    with make_context():
        module = ir.Module.parse(text)
        graph = PropagationGraph(module.operation)
        adds = [op for op, name in enumerate(graph.op_name) if name == "stablehlo.add"]
        assert len(adds) == 2
        assert graph.rule(adds[0]) is graph.rule(adds[1])
        assert len(graph._rule_memo) == 1


def test_rule_for_with_printed_texts_gives_the_same_rules():
    """The registry's key printed through a caller's ``texts`` dict (one context's
    printed types and attributes) is the key printed afresh: same rules."""
    with make_context():
        module = ir.Module.parse(PROGRAM)
        graph = PropagationGraph(module.operation)
        texts: dict[int, str] = {}
        clear_cache()
        fresh = [rule_for(op) for op in graph.ops]
        clear_cache()
        printed = [rule_for(op, False, texts) for op in graph.ops]
        assert printed == fresh
        assert texts and all(isinstance(text, str) for text in texts.values())
        # A rule computed once answers the other route's key too.
        assert [rule_for(op) for op in graph.ops] == fresh


def test_graph_rules_are_the_registrys():
    """``PropagationGraph.rule`` answers what ``rule_for`` does, also for ops the
    registry gives no rule (answered without a key) unless one is attached."""
    text = """
    func.func @main(%arg0: tensor<8xf32>) -> tensor<8xf32> {
      %0 = stablehlo.optimization_barrier %arg0 : tensor<8xf32>
      %1 = "stablehlo.optimization_barrier"(%arg0)
           {sdy.sharding_rule = #sdy.op_sharding_rule<([i])->([i]) {i=8}>}
           : (tensor<8xf32>) -> tensor<8xf32>
      %2 = stablehlo.add %arg0, %0 : tensor<8xf32>
      %3 = stablehlo.multiply %2, %1 : tensor<8xf32>
      return %3 : tensor<8xf32>
    }"""
    with make_context():
        module = ir.Module.parse(text)
        graph = PropagationGraph(module.operation)
        for op in range(len(graph.ops)):
            rule = rule_for(graph.ops[op])
            compact = graph.rule(op)
            assert (compact.rule if compact is not None else None) == rule
        barriers = [op for op, name in enumerate(graph.op_name)
                    if name == "stablehlo.optimization_barrier"]
        assert graph.rule(barriers[0]) is None and graph.rule(barriers[1]) is not None
