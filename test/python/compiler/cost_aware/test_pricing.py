"""What the cost-aware search prices a candidate at (``compiler/cost_aware/pricing.py``)."""

import jax.numpy as jnp
import numpy as np
import pytest
from jaxlib.mlir import ir
from search_programs import imported

from shardc.compiler import jit
from shardc.compiler.cost import report
from shardc.compiler.cost.fusion import fused_away
from shardc.compiler.cost.report import BYTES, comm_report_of
from shardc.compiler.cost_aware.candidates import (
    Pin,
    apply_pins,
    conflict_points,
    ops_by_tag,
    pinned_clone,
    tag_of,
)
from shardc.compiler.cost_aware.explicit import signature, signatures
from shardc.compiler.cost_aware.pricing import (
    MEMORY,
    ModuleEvaluator,
    PinnedCopies,
    changed_tags,
    memory_peak,
    price,
)
from shardc.compiler.propagation import propagate
from shardc.compiler.propagation.graph import ReadMemo
from shardc.compiler.propagation.values import CostMemo, ModuleValues
from shardc.dialects import make_context
from shardc.dialects.sdy import SHARDING_ATTR, SHARDING_RULE_ATTR


def test_fused_away_needs_a_fusible_producer_and_fusing_consumers():
    assert fused_away("stablehlo.broadcast_in_dim", ["stablehlo.add", "stablehlo.reduce"])
    assert not fused_away("stablehlo.broadcast_in_dim", ["stablehlo.dot_general"])
    assert not fused_away("stablehlo.dot_general", ["stablehlo.add"])
    assert not fused_away("stablehlo.add", ["func.return"])  # an output has a buffer
    assert not fused_away("stablehlo.add", [])


def test_memory_peak_skips_values_fused_into_their_consumers():
    # tanh(x + b): XLA fuses the broadcast of b and the add into the tanh, so only
    # the arguments (live together at the start) and the returned result hold memory.
    # The broadcast and the sum, both as big as x, used to be counted live next to x
    # (3x its bytes): a pin that replicated the broadcast scale vectors of a layer
    # norm looked heavier than Shardy's choice.
    x, b = np.ones((16, 32), np.float32), np.ones((32,), np.float32)
    text = jit(lambda x, b: jnp.tanh(x + b)).lower(x, b).as_text()
    module = ir.Module.parse(text, make_context())
    reader = ModuleValues(module.operation, missing_as_replicated=True)
    assert memory_peak(reader) == x.nbytes + b.nbytes


def test_rules_attached_after_the_baseline_price_candidates_as_computed_ones():
    """The baseline evaluation attaches its rules to the imported module; a candidate
    propagated from it is priced and propagated exactly as from the bare module."""
    attached = ModuleEvaluator(imported("conflict_mlp").operation, conservative=False)
    *_, baseline = attached([])
    assert any(SHARDING_RULE_ATTR in op.attributes for op in baseline.graph.ops)
    assert any(SHARDING_RULE_ATTR in op.attributes for op in
               attached.imported.regions[0].blocks[0].operations[-1].regions[0].blocks[0])
    pins = [pin for point in conflict_points(baseline) for pin in point.alternatives]
    assert pins
    for pin in pins:
        bare = ModuleEvaluator(imported("conflict_mlp").operation, conservative=False)
        bare.baseline = attached.baseline  # no baseline run: its rules stay computed
        *expected, expected_reader = bare([pin])
        *found, reader = attached([pin])
        assert found == expected
        reader.write_back()  # a candidate's module is written when the search keeps it
        assert str(reader.graph.module) == str(expected_reader.graph.module)


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


@pytest.mark.parametrize("make", [
    lambda: imported("conflict_mlp"),
    lambda: imported("shard_map_pipeline"),  # manual computations: read again
    lambda: ir.Module.parse(_DEAD_ADD, make_context()),  # an erased op: read again
], ids=["conflict_mlp", "shard_map_pipeline", "dead_add"])
def test_a_propagated_reader_reads_what_reading_the_module_again_reads(make):
    """``ModuleValues.propagated`` reads the propagation's own graph and store."""
    module = make()
    with module.context:
        unwritten = ModuleValues.propagated(module.operation.clone(), plan="user-priority",
                                            conservative=False, missing_as_replicated=True,
                                            write=False)
        reader = ModuleValues.propagated(module.operation, plan="user-priority",
                                         conservative=False, missing_as_replicated=True)
    again = ModuleValues(module.operation, missing_as_replicated=True)
    assert not any(reader.graph.erased)
    assert _observed(reader) == _observed(again)
    # A reader whose module was not written back reads the same (pricing uses a
    # reader up: a fresh one).
    assert not any(unwritten.graph.erased)
    assert _observed(unwritten) == _observed(ModuleValues(module.operation,
                                                          missing_as_replicated=True))


@pytest.mark.parametrize("name", ["conflict_mlp", "scan_rnn"])
def test_a_sharding_id_names_the_sharding_a_reader_reads(name):
    """``ModuleValues.sharding_id`` is the interned ``sharding`` of every value, also
    of those the store holds none for (memoised across copies by mesh and rank, but
    a loop body's arguments, which read their loop's) and in a second reader."""
    evaluator = ModuleEvaluator(imported(name).operation, conservative=False)
    *_, baseline = evaluator([])
    pins = [pin for point in conflict_points(baseline) for pin in point.alternatives]
    for reader in [baseline, *(evaluator([pin])[2] for pin in pins[:2])]:
        again = ModuleValues(reader.graph.module, missing_as_replicated=True,
                             read=(reader.graph, reader.store), costs=evaluator.costs)
        for read in (reader, again):
            assert [read.sharding_id(v) for v in range(len(read.graph.values))] == [
                read.store.intern(read.sharding(v)) for v in range(len(read.graph.values))]
    assert evaluator.costs.unsharded


@pytest.mark.parametrize("name", ["conflict_mlp", "conv_net", "moe_routing"])
def test_signatures_are_every_tagged_ops_signature(name):
    """``signatures`` keeps which values each op's signature reads in the reader's
    facts (shared by the readers of one read): still ``signature`` op by op, in
    every reader of those facts."""
    evaluator = ModuleEvaluator(imported(name).operation, conservative=False)
    *_, baseline = evaluator([])
    pins = [pin for point in conflict_points(baseline) for pin in point.alternatives]
    assert pins
    copies = PinnedCopies(evaluator.imported, False, CostMemo(ReadMemo()))
    for chosen in [[], [pins[0]], pins[:3]]:
        reader = copies.propagated(chosen, write=False)
        graph = reader.graph
        expected = {tag_of(reader, op): signature(reader, op) for op in range(len(graph.ops))
                    if tag_of(reader, op) is not None}
        assert signatures(reader) == expected
        assert any(signature(reader, op) != signature(baseline, op)
                   for op in range(len(graph.ops))) == bool(chosen)


def test_an_unwritten_propagation_leaves_the_module_as_it_was():
    module = imported("conflict_mlp")
    with module.context:
        *_, reader = ModuleEvaluator(module.operation, conservative=False)([])  # rules attached
        before = str(module)
        unwritten = ModuleValues.propagated(module.operation, plan="user-priority",
                                            conservative=False, missing_as_replicated=True,
                                            write=False)
    assert str(module) == before
    assert price(unwritten) == price(ModuleValues(reader.graph.module,
                                                  missing_as_replicated=True))
    # Written later, it is the module written at once.
    unwritten.write_back()
    assert str(module) == str(reader.graph.module)
    unwritten.write_back()  # once
    assert str(module) == str(reader.graph.module)


@pytest.mark.parametrize("name", ["conflict_mlp", "conflict_attention_seq", "conv_net",
                                  "moe_routing"])
def test_copies_propagated_on_one_read_are_the_pinned_clones_propagated(name):
    """``PinnedCopies`` propagates a copy's pins as starting shardings on one shared read
    of the module: the reader reads what the pinned clone's propagation reads, and
    written back (the search keeps it), it is that clone as propagated."""
    evaluator = ModuleEvaluator(imported(name).operation, conservative=False)
    *_, baseline = evaluator([])
    pins = [pin for point in conflict_points(baseline) for pin in point.alternatives]
    module = evaluator.imported
    copies = PinnedCopies(module, False, CostMemo(ReadMemo()))
    ops = ops_by_tag(module)
    candidates = [[], *([pin] for pin in pins[:4]), pins[:3]]
    for chosen in candidates:
        shared = copies.propagated(chosen, write=False)
        with module.context:
            expected = ModuleValues.propagated(pinned_clone(module, ops, chosen),
                                               plan="user-priority", conservative=False,
                                               missing_as_replicated=True, write=False)
        assert _observed(shared) == _observed(expected)
        assert signatures(shared) == signatures(expected)
        shared.write_back()
        expected.write_back()
        assert str(shared.graph.module) == str(expected.graph.module)
        assert _observed(shared) == _observed(expected)
    assert copies._read.runs == len(candidates)  # none propagated a copy instead


def test_copies_read_with_one_memo_propagate_as_copies_read_alone():
    """The search's evaluators share a ``ReadMemo`` across the copies they propagate."""
    module = imported("conflict_mlp")
    with module.context:
        expected = module.operation.clone()
        propagate(expected, plan="user-priority", keep_sharding_rules=True)
        memo = ReadMemo()
        for _ in range(2):
            copy = module.operation.clone()
            ModuleValues.propagated(copy, plan="user-priority", conservative=False,
                                    costs=CostMemo(memo))
            assert str(copy) == str(expected)
        assert memo.rules and memo.shardings


@pytest.mark.parametrize("name", ["conflict_mlp", "conv_net", "embedding_scatter",
                                  "moe_routing"])
def test_copies_priced_with_one_cost_memo_price_as_copies_priced_alone(name):
    """The evaluators' ``CostMemo`` answers for an op seen in another copy with
    the same rule, types and shardings: the price is the one found without it
    (reduce_window, gather and scatter ops are found again every time), also
    where it answers with the op's bytes alone (a second reader of a copy)."""
    evaluator = ModuleEvaluator(imported(name).operation, conservative=False)
    *_, baseline = evaluator([])
    pins = [pin for point in conflict_points(baseline) for pin in point.alternatives]
    for reader in [baseline, *(evaluator([pin])[2] for pin in pins[:4])]:
        read = (reader.graph, reader.store)
        alone = ModuleValues(reader.graph.module, missing_as_replicated=True, read=read)
        memoised = ModuleValues(reader.graph.module, missing_as_replicated=True, read=read,
                                costs=evaluator.costs)
        expected = price(alone)  # a reader prices once: its reshard cache fills
        assert price(memoised) == expected
        again = ModuleValues(reader.graph.module, missing_as_replicated=True, read=read,
                             costs=evaluator.costs)
        assert price(again) == expected
        assert comm_report_of(ModuleValues(reader.graph.module, missing_as_replicated=True,
                                           read=read, costs=evaluator.costs)) == \
            comm_report_of(ModuleValues(reader.graph.module, missing_as_replicated=True,
                                        read=read))
    assert evaluator.costs.found and evaluator.costs.bytes and evaluator.costs.returns
    assert evaluator.costs.sizes


@pytest.mark.parametrize("name", ["conv_net", "embedding_scatter", "moe_routing"])
def test_copies_on_one_read_price_the_ops_their_attributes_decide_as_alone(name):
    """The copies propagated on one read keep what the ops their attributes decide
    need (convolutions, windows, gathers, scatters, sorts: no ``CostMemo`` key) by op
    and shardings in the facts they share: each copy still prices as read alone."""
    evaluator = ModuleEvaluator(imported(name).operation, conservative=False)
    *_, baseline = evaluator([])
    pins = [pin for point in conflict_points(baseline) for pin in point.alternatives]
    copies = PinnedCopies(evaluator.imported, False, evaluator.costs)
    for chosen in [[], *([pin] for pin in pins[:4]), [], pins[:2]]:
        shared = copies.propagated(chosen, write=False)
        alone = ModuleValues(shared.graph.module, missing_as_replicated=True,
                             read=(shared.graph, shared.store))
        assert price(shared) == price(alone)  # each reader prices once: its reshard cache fills
    assert copies._read.facts["op needs"]


@pytest.mark.parametrize("name", ["conflict_mlp", "conflict_attention_seq", "conv_net",
                                  "moe_routing", "scan_rnn"])
def test_copies_priced_again_from_another_copys_price_price_as_alone(name, monkeypatch):
    """A copy priced from what was kept of another copy of the same read's price
    (``priced_from``: its bytes by op, ``BytesByOp``, and live sizes, ``LiveSizes``)
    is priced again only where its shardings differ: at the price it has alone, and
    at the other copy's where it differs in nothing."""
    evaluator = ModuleEvaluator(imported(name).operation, conservative=False)
    *_, baseline = evaluator([])
    pins = [pin for point in conflict_points(baseline) for pin in point.alternatives]
    copies = PinnedCopies(evaluator.imported, False, evaluator.costs)
    first = copies.propagated([], write=False)
    expected = price(first)
    kept = first.priced
    assert kept[BYTES].holds_for(first) and kept[MEMORY].holds_for(first)
    assert expected == price(ModuleValues(  # a reader prices once
        first.graph.module, missing_as_replicated=True, read=(first.graph, first.store)))
    priced_ops = []
    priced = report._priced
    monkeypatch.setattr(report, "_priced", lambda reader, ops, *rest: priced_ops.append(
        ops) or priced(reader, ops, *rest))
    same = copies.propagated([], write=False)
    same.priced_from = kept
    assert price(same) == expected
    assert priced_ops[-1] == kept[BYTES].others
    assert len(kept[BYTES].others) < len(first.graph.ops)  # not every op again
    assert pins
    for chosen in [*([pin] for pin in pins[:6]), pins[:3]]:
        shared = copies.propagated(chosen, write=False)
        shared.priced_from = kept
        assert kept[BYTES].holds_for(shared) and kept[MEMORY].holds_for(shared)
        alone = ModuleValues(shared.graph.module, missing_as_replicated=True,
                             read=(shared.graph, shared.store))
        assert price(shared) == price(alone)
        assert not shared.priced  # priced again, not from scratch
    other = ModuleValues(first.graph.module, missing_as_replicated=True,
                         read=(first.graph, first.store), costs=evaluator.costs)
    # Another layout's facts: priced from scratch.
    assert not kept[BYTES].holds_for(other) and not kept[MEMORY].holds_for(other)


@pytest.mark.parametrize("name", ["conflict_mlp", "conv_net", "moe_routing", "scan_rnn"])
def test_the_ops_a_candidate_changes_are_found_from_the_slots_it_changes(name):
    """The evaluator reads again only the signatures of the ops with a value whose store
    slot differs from the baseline's (``ModuleEvaluator.changed``): it finds the ops
    comparing every signature finds."""
    evaluator = ModuleEvaluator(imported(name).operation, conservative=False)
    *_, baseline = evaluator([])
    pins = [pin for point in conflict_points(baseline) for pin in point.alternatives]
    assert pins
    found = set()
    for chosen in [*([pin] for pin in pins[:6]), pins[:3]]:
        *_, reader = evaluator(chosen)
        assert reader.facts is evaluator._baseline_slots[0]  # read again only in part
        changed = evaluator.changed(reader)
        assert changed == changed_tags(evaluator.baseline, reader)
        found |= changed
    assert found


def test_conflict_points_found_with_a_cost_memo_are_those_found_without():
    evaluator = ModuleEvaluator(imported("conflict_attention_seq").operation,
                                conservative=False)
    *_, baseline = evaluator([])
    pins = [pin for point in conflict_points(baseline) for pin in point.alternatives]
    for reader in [baseline, *(evaluator([pin])[2] for pin in pins[:4])]:
        read = (reader.graph, reader.store)
        alone = ModuleValues(reader.graph.module, missing_as_replicated=True, read=read)
        assert conflict_points(reader) == conflict_points(alone)
        assert conflict_points(reader) == conflict_points(alone)  # from the memo
    assert evaluator.costs.conflicts


def test_a_pinned_clone_is_the_clone_with_the_pins_applied_and_the_module_unchanged():
    module = imported("conflict_mlp")
    with module.context:
        *_, baseline = ModuleEvaluator(module.operation, conservative=False)([])
        pins = [pin for point in conflict_points(baseline) for pin in point.alternatives]
        # Pins on ops without a sharding, and one on an op that has one already.
        apply_pins(module.operation, pins[:1])
        pins.append(Pin(pins[0].op, 0, pins[1].sharding, "over a sharding"))
        ops = ops_by_tag(module.operation)
        assert SHARDING_ATTR in ops[pins[0].op][0].attributes
        before = str(module)
        for chosen in ([], pins[:1], pins[-2:], pins):
            expected = module.operation.clone()
            apply_pins(expected, chosen)
            assert str(pinned_clone(module.operation, ops, chosen)) == str(expected)
            assert str(module) == before


@pytest.mark.parametrize("name", ["conflict_mlp", "moe_routing"])
def test_constants_are_priced_from_the_memo_as_without_it(name):
    """A constant carries no attached rule (no op key): its needs are memoised by its
    name, result type and sharding (an op part of its own, with no rule), and a module
    is priced as a reader without the memo prices it."""
    evaluator = ModuleEvaluator(imported(name).operation, conservative=False)
    *_, baseline = evaluator([])
    module = baseline.graph.module
    names = ("sdy.constant", "stablehlo.constant")
    assert any(n in names for n in baseline.graph.op_name)
    constants = {number for part, number in evaluator.costs.ops.items()
                 if part[0] in names and part[1] is None}
    assert constants and any(key[0] in constants for key in evaluator.costs.found)
    # (A reader prices once: its reshard cache fills. Each of these is fresh.)
    expected = price(ModuleValues(module, missing_as_replicated=True))
    for _ in range(2):  # the second finds every constant's needs in the memo
        assert price(ModuleValues(module, missing_as_replicated=True,
                                  costs=evaluator.costs)) == expected


@pytest.mark.parametrize("name", ["conv_net", "moe_routing", "scan_rnn"])
def test_constants_and_ops_their_own_values_decide_are_kept_by_a_copys_price(name):
    """A constant (no rule) and an op its attributes decide or without a rule (a
    convolution, a slice, a data-flow edge) are looked up by a key of their own
    values' shardings: where their needs reshard no operand, a copy's ``BytesByOp``
    keeps them, so a candidate prices them again only where their slots change (at
    the price it has alone: ``test_copies_priced_again_from_another_copys_price...``).
    Gathers, scatters, windows, custom calls and rotations are priced again in every
    copy (what they note for later ops, or read, is more than their values)."""
    evaluator = ModuleEvaluator(imported(name).operation, conservative=False)
    *_, baseline = evaluator([])
    kept = baseline.priced[BYTES]
    names = baseline.graph.op_name
    in_order = {"stablehlo.gather", "stablehlo.scatter", "stablehlo.reduce_window",
                "stablehlo.custom_call"}
    layout = report._layout(baseline)
    own = [op for op in (*kept.kept, *kept.others)
           if isinstance(layout[op], tuple) and names[op] not in in_order
           and not report._rotates(baseline, op)
           and (baseline.op_key(op) is None or names[op] in report._UNMEMOISED)
           and not any(need.target is not None for need in report._op_needs(baseline, op)[0])
           and not any(baseline.reads_loop_result(value) for value in layout[op][1])]
    assert own and any(names[op] in ("sdy.constant", "stablehlo.constant") for op in own)
    assert all(op in kept.kept for op in own)
    assert all(op in kept.others for op in (*kept.kept, *kept.others)
               if names[op] in in_order or report._rotates(baseline, op))
