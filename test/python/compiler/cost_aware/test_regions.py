"""Region rounds of the cost-aware search (``compiler/cost_aware/regions.py``).

Above a module size the search prices candidates on regions cut out around
each conflict, memoised by structure; these tests hold it to the module-wide
search's results, check that repeated layers share one evaluation, and check
the cut-out modules themselves. No compilation: predicted bytes only (the
compiled bytes are ``test_cost_aware.py``'s).
"""

import gc
import weakref

import pytest
from jaxlib.mlir import ir

from bench import e2e_measure
from bench.models import REGISTRY, REGRESSIONS
from bench.zoo import REGISTRY as ZOO
from shardc.compiler import jit
from shardc.compiler.cost_aware import cost_aware_pipeline
from shardc.compiler.cost_aware.candidates import (
    apply_pins,
    conflict_points,
    op_tags,
    ops_by_tag,
    tag_of,
    tag_ops,
)
from shardc.compiler.cost_aware.pricing import PinnedCopies, attach_rules, price
from shardc.compiler.cost_aware.regions import (
    RegionEvaluator,
    cut_out,
    imported_shardings,
    open_positions,
    region_graph,
    region_of,
    structure_key,
)
from shardc.compiler.propagation import propagate
from shardc.compiler.propagation.graph import PropagationGraph, ReadMemo
from shardc.compiler.propagation.ir_access import ShardingStore
from shardc.compiler.propagation.values import CostMemo, ModuleValues
from shardc.compiler.stages import import_pipeline
from shardc.compiler.stages.capture_loop_invariants import capture_loop_invariants
from shardc.compiler.stages.fold_identities import fold_identities
from shardc.dialects import make_context

PROGRAMS = {**REGISTRY, **REGRESSIONS}


def unpropagated(name: str) -> str:
    program = PROGRAMS[name]("small")
    jitted = jit(program.fun, in_shardings=program.in_shardings,
                 out_shardings=program.out_shardings)
    return jitted.lower(*program.args, propagate=False).as_text()


def resolve_text(text: str, **options):
    module = ir.Module.parse(text, make_context())
    return cost_aware_pipeline(module.operation, **options)


@pytest.mark.parametrize("name", ["conflict_mlp", "conflict_attention", "conflict_attention_seq",
                                  "conflict_mlp_wide", "conflict_fsdp_pair", "transformer"])
def test_region_rounds_find_what_module_rounds_find(name):
    text = unpropagated(name)
    module_wide = resolve_text(text, local_above=10**9)
    regional = resolve_text(text, local_above=0)
    assert regional.region_evaluations > 0 or not module_wide.pins
    assert regional.final_bytes == module_wide.final_bytes, regional.format_text()
    assert regional.final_memory <= regional.baseline_memory


def test_repeated_layers_share_one_region_evaluation():
    resolution = resolve_text(unpropagated("conflict_mlp_deep"))
    assert resolution.region_evaluations > 0  # past the module-round size
    assert resolution.region_evaluations <= 64 + 64  # closed, then steady-state prices
    assert resolution.evaluations <= 1 + 4  # the baseline and the verifications
    first = resolution.decisions[0]
    assert first.chosen is not None and first.points >= 30, resolution.format_text()
    # Every viable class verified at once (one module propagation): 0.25x predicted.
    assert resolution.final_bytes < 0.3 * resolution.baseline_bytes, resolution.format_text()
    assert resolution.final_memory <= resolution.baseline_memory


def _propagated_deep_stack():
    return _propagated("conflict_mlp_deep")


def _propagated(name: str):
    """Program ``name`` imported and numbered (a clone: ``imported``, given the rules
    propagation attached, as the search gives its imported module), then propagated
    (the module itself, and its reader)."""
    module = ir.Module.parse(unpropagated(name), make_context())
    operation = module.operation
    with operation.context:
        import_pipeline(operation)
        tag_ops(operation)
        imported = operation.clone()
        propagate(operation, plan="user-priority", keep_sharding_rules=True)
        reader = ModuleValues(operation, missing_as_replicated=True)
        attach_rules(imported, reader)
    return module, imported, reader


def test_interior_layers_have_equal_regions_and_ends_differ():
    module, imported, reader = _propagated_deep_stack()
    points = [p.op for p in conflict_points(reader) if p.name == "stablehlo.dot_general"]
    starts = imported_shardings(imported)
    keys = [structure_key(reader, region_of(reader, [op], 128, 4), starts, {}) for op in points]
    middle = len(keys) // 2
    assert keys[middle] == keys[middle + 2]  # the same dot of two interior layers
    assert keys[middle] != keys[middle + 1]  # the layer's other dot
    assert keys[0] != keys[middle]  # the first layer sees the function's arguments


def test_cut_out_region_is_a_valid_module_with_closed_boundary():
    module, imported, reader = _propagated_deep_stack()
    point = next(p.op for p in conflict_points(reader))
    ops = region_of(reader, [point], 128, 4)
    region, returns = cut_out(reader, ops, ops_by_tag(imported))
    assert region.operation.verify()
    signature = next(line for line in str(region).splitlines() if "func.func" in line)
    assert signature.count("sdy.sharding<") > 2 and "?" not in signature  # closed boundary
    main = region.body.operations[-1]
    assert len(main.regions[0].blocks[0].operations) == len(ops) + 1  # plus the return
    assert returns == frozenset()  # the first layer's dot returns nothing of the program


@pytest.mark.parametrize("name", ["conflict_mlp_deep", "transformer", "conflict_attention"])
def test_cut_out_regions_have_the_use_lists_of_their_clones(name):
    """A region's read is taken from the cut-out module itself, not from a clone
    (``PinnedCopies(graph=...)``): its uses, in the order that decides
    propagation's worklist, must be those of the copies propagated from it."""
    module, imported, reader = _propagated(name)
    sources = ops_by_tag(imported)
    shared = 0
    for point in conflict_points(reader):
        ops = region_of(reader, [point.op], 128, 4)
        for open_cut in (False, True):
            region, _ = cut_out(reader, ops, sources, open_cut=open_cut)
            uses = PropagationGraph(region.operation).uses
            assert uses == PropagationGraph(region.operation.clone()).uses
            shared += any(len(users) > 1 for users in uses)
    assert shared  # some value has several uses, whose order is what is compared


@pytest.mark.parametrize("name", ["conflict_mlp_deep", "transformer", "moe_routing",
                                  "scan_rnn"])
def test_a_regions_graph_and_store_are_what_a_walk_of_its_cut_out_module_reads(name):
    """The evaluator reads a region without cutting it out (``region_graph``): every op
    and value (nested bodies included), their numbering and uses in use-list order, the
    ops' attributes and numbers and the values' types are those a walk of the module
    ``cut_out`` makes reads, and its store, started from the accepted pins
    (``PinnedCopies``), is the store read from that module with the pins applied."""
    module, imported, reader = _propagated(name)
    sources = ops_by_tag(imported)
    fields = ("op_name", "op_parent", "op_operands", "op_results", "op_blocks",
              "op_terminator", "erased", "value_def", "value_owner", "value_arg_index",
              "value_shape", "value_type_key", "uses", "dynamic_values")
    points = conflict_points(reader)
    pins = [pin for point in points for pin in point.alternatives[:1]]
    nested = shared = pinned = 0
    for point in points:
        ops = region_of(reader, [point.op], 128, 4)
        graph, tags, returns = region_graph(reader, ops, sources)
        cut, cut_returns = cut_out(reader, ops, sources)
        walked = PropagationGraph(cut.operation)
        for field in fields:
            assert getattr(graph, field) == getattr(walked, field), field
        assert returns == cut_returns
        assert tags == op_tags({}, walked)
        for op, ir_op in enumerate(walked.ops[:-1]):  # the return's operands are its own
            assert _attributes(graph.ops[op]) == _attributes(ir_op)
        assert [hash(v.type) for v in graph.values] == [hash(v.type) for v in walked.values]
        nested += any(graph.op_blocks[op] for op in range(2, len(graph.ops)))
        shared += any(len(users) > 1 for users in graph.uses)
        accepted = [pin for pin in pins if pin.op in {tag_of(reader, op) for op in ops}]
        copies = PinnedCopies(None, False, CostMemo(ReadMemo()), graph=graph, tags=tags,
                              pins=accepted, make=lambda: None)
        store = copies._shared_read().store
        with cut.context:
            apply_pins(cut.operation, accepted)
        read = ShardingStore(PropagationGraph(cut.operation))
        assert (store.value, store.sid, store.where) == (read.value, read.sid, read.where)
        assert ({op: hash(a) for op, a in store.sharding_attrs.items()}
                == {op: hash(a) for op, a in read.sharding_attrs.items()})
        pinned += len(accepted)
    assert shared  # some value has several uses, whose order is what is compared
    assert pinned  # some region starts from pins
    if name == "transformer":
        assert nested  # a region holds a reduction's body


def _attributes(op: ir.Operation) -> dict[str, int]:
    return {name: hash(op.attributes[name]) for name in op.attributes}


def test_cuts_sharing_their_boundary_attributes_are_the_cuts_made_alone():
    """The evaluator keeps the boundary attributes it made (``cut_out(made=...)``)
    for its later cuts: every region, closed and open, cuts out as without them."""
    module, imported, reader = _propagated_deep_stack()
    sources = ops_by_tag(imported)
    made: dict = {}
    points = [p.op for p in conflict_points(reader)]
    assert len(points) > 2
    for point in points:
        ops = region_of(reader, [point], 128, 4)
        for open_cut in (True, False):
            shared, shared_returns = cut_out(reader, ops, sources, open_cut=open_cut, made=made)
            alone, returns = cut_out(reader, ops, sources, open_cut=open_cut)
            assert str(shared) == str(alone) and shared_returns == returns
    assert len(made) > 2


def test_open_cut_leaves_only_the_functions_own_boundary_sharded():
    # The steady-state price: values crossing the cut from other ops settle with the
    # candidate; the program's own arguments (the weights) keep their shardings.
    module, imported, reader = _propagated_deep_stack()
    point = next(p.op for p in conflict_points(reader))
    ops = region_of(reader, [point], 128, 4)
    closed_region, _ = cut_out(reader, ops, ops_by_tag(imported))
    open_region, returns = cut_out(reader, ops, ops_by_tag(imported), open_cut=True)
    assert open_region.operation.verify()
    main = open_region.body.operations[-1]
    args = list(ir.ArrayAttr(main.attributes["arg_attrs"]))
    entering = main.regions[0].blocks[0].arguments
    graph = reader.graph
    crossing = [v for op in ops for v in graph.op_operands[op] if graph.value_def[v] not in ops]
    crossing = list(dict.fromkeys(crossing))
    assert len(crossing) == len(entering) == len(args)
    for value, attrs in zip(crossing, args):
        own_argument = graph.value_def[value] < 0
        assert ("sdy.sharding" in ir.DictAttr(attrs)) == own_argument
    assert any(graph.value_def[v] >= 0 for v in crossing)  # some crossing value is opened
    results = list(ir.ArrayAttr(main.attributes["res_attrs"]))
    assert all("sdy.sharding" not in ir.DictAttr(r) for r in results)  # none returned
    assert returns == frozenset()
    assert str(closed_region) != str(open_region)


def lm_resolve(name: str, **options):
    """The search on a zoo language model's train step, as ``jit`` runs it: after XLA's
    import rewrites (folded identities decide how the residual stream propagates)."""
    program = ZOO[name]("small")
    with e2e_measure.mesh_context(program):
        jitted, args, _ = e2e_measure.prepare(program, "shardc")
        text = jitted.lower(*args, propagate=False).as_text()
    module = ir.Module.parse(text, make_context())
    with module.context:
        fold_identities(module.operation)
        capture_loop_invariants(module.operation)
    return cost_aware_pipeline(module.operation, **options)


def test_steady_state_prices_find_the_hand_written_activation_constraints():
    """lm_linen without its activation constraints: Shardy shards the residual stream on
    the FSDP axis (3x the bytes of the hand-constrained step). Pinning one residual value
    to the batch axis re-settles every activation, which a closed region only sees as a
    reshard moved to its cut; with no closed region priced at all, the steady-state
    prices alone find a class that the module verifies at the constrained step's bytes."""
    constrained = lm_resolve("lm_linen")
    free = lm_resolve("lm_linen_unconstrained", max_region_evaluations=0)
    assert free.baseline_bytes > 2.5 * constrained.final_bytes
    assert free.final_bytes <= 1.2 * constrained.final_bytes, free.format_text()
    assert free.final_memory <= free.baseline_memory
    kept = [d for d in free.decisions if d.chosen]
    assert kept and all(d.scope.startswith("steady state") for d in kept), free.format_text()
    assert free.evaluations <= 1 + 4  # the baseline and at most every verification


def test_structure_key_tells_reduce_bodies_apart():
    text = """
    sdy.mesh @mesh = <["x"=8]>
    func.func @main(%arg0: tensor<8x16xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"x"}, {}]>})
        -> (tensor<8xf32>, tensor<8xf32>) {
      %init = stablehlo.constant dense<0.0> : tensor<f32>
      %0 = stablehlo.reduce(%arg0 init: %init) applies stablehlo.add across dimensions = [1]
          : (tensor<8x16xf32>, tensor<f32>) -> tensor<8xf32>
      %1 = stablehlo.reduce(%arg0 init: %init) applies stablehlo.maximum across dimensions = [1]
          : (tensor<8x16xf32>, tensor<f32>) -> tensor<8xf32>
      return %0, %1 : tensor<8xf32>, tensor<8xf32>
    }
    """
    module = ir.Module.parse(text, make_context())
    with module.context:
        tag_ops(module.operation)
        reader = ModuleValues(module.operation, missing_as_replicated=True)
    reduces = [op for op, name in enumerate(reader.graph.op_name) if name == "stablehlo.reduce"]
    starts = imported_shardings(module.operation)
    add, maximum = (structure_key(reader, [op], {}, {}) for op in reduces)
    assert add != maximum
    assert structure_key(reader, [reduces[0]], starts, {}) == add


def test_transformer_search_cost_does_not_grow_with_layers():
    """The bound that replaced 46x: one module propagation when no pin helps, and region
    evaluations that stop growing once the interior layers share their regions."""
    from bench import propagation as transformer_bench

    used = {}
    for layers in (12, 24):
        fun, args, in_shardings = transformer_bench.transformer_program(layers)
        lowered = jit(fun, in_shardings=in_shardings, propagation="cost-aware").lower(*args)
        resolution = lowered.cost_aware_resolution
        assert resolution.evaluations == 1, resolution.format_text()  # the baseline only
        used[layers] = resolution.region_evaluations
    assert 0 < used[24] == used[12] <= 64, used


def test_open_cut_copies_propagated_on_the_closed_cuts_read_are_the_open_cuts_copies():
    """The open cut is the closed one with some function arguments and results left
    without a sharding: its copies propagate on the closed cut's read (``opened``) to
    what the open cut's own copies propagate to."""
    module, imported, reader = _propagated_deep_stack()
    sources = ops_by_tag(imported)
    points = conflict_points(reader)
    checked = 0
    for point in points[:3]:
        ops = region_of(reader, [point.op], 128, 4)
        closed_region, _ = cut_out(reader, ops, sources)
        open_region, _ = cut_out(reader, ops, sources, open_cut=True)
        costs = CostMemo(ReadMemo())
        closed = PinnedCopies(closed_region, False, costs)
        made = []
        opened = closed.opened(*open_positions(reader, ops), lambda: made.append(1) or open_region)
        assert any(open_positions(reader, ops))
        alone = PinnedCopies(open_region, False, CostMemo(ReadMemo()))
        for pins in ([], *([pin] for pin in point.alternatives)):
            shared = opened.propagated(pins, write=False)
            expected = alone.propagated(pins, write=True)  # a copy of the open cut itself
            assert [shared.sharding(v) for v in range(len(shared.graph.values))] == \
                [expected.sharding(v) for v in range(len(expected.graph.values))]
            assert price(shared) == price(expected)
            checked += 1
        assert not made  # the open cut's module was never needed
    assert checked > 3


def test_a_region_is_priced_on_the_first_cut_of_its_structure():
    """Regions of one structure (interior layers), in one state or in a later one, are
    priced on the modules cut out for the first of them (their op numbers mapped by
    position): as on their own cuts."""
    module, imported, reader = _propagated_deep_stack()
    points = [p for p in conflict_points(reader) if p.name == "stablehlo.dot_general"]
    middle = len(points) // 2
    first, other = points[middle], points[middle + 2]
    shared = RegionEvaluator(imported, limit=128, radius=4, conservative=False)
    shared.set_state(reader, [])
    shared.price_pin((first.op,), first.alternatives[0])
    shared.set_state(reader, [])  # a later state: its regions are found again
    assert shared._region((other.op,)).cut is not shared._region((other.op,))
    assert len(other.alternatives) > 1
    for pin in other.alternatives:
        alone = RegionEvaluator(imported, limit=128, radius=4, conservative=False)
        alone.set_state(reader, [])
        for price_of in ("price_pin", "steady_price"):
            found = getattr(shared, price_of)((other.op,), pin)
            expected = getattr(alone, price_of)((other.op,), pin)
            assert (found.base_bytes, found.base_memory, found.bytes, found.memory) == (
                expected.base_bytes, expected.base_memory, expected.bytes, expected.memory)
    assert shared.steady_count > 0


def test_region_evaluator_is_freed_without_the_cyclic_collector():
    """The search runs with cyclic collection paused: an evaluator in a reference cycle
    (a region's open-cut copies keeping a maker that holds the region) would outlive
    it, and the first collection after it would scan all it kept. Dropped, it is
    freed at once."""
    module, imported, reader = _propagated_deep_stack()
    enabled = gc.isenabled()
    gc.disable()
    try:
        evaluator = RegionEvaluator(imported, limit=128, radius=4, conservative=False)
        evaluator.set_state(reader, [])
        for point in conflict_points(reader)[:2]:
            for pin in point.alternatives[:2]:
                evaluator.price_pin((point.op,), pin)
                evaluator.steady_price((point.op,), pin)
        assert evaluator.steady_count > 0
        alive = weakref.ref(evaluator)
        del evaluator
        assert alive() is None
    finally:
        if enabled:
            gc.enable()


def test_structure_key_reads_complex_constants():
    """The bindings cannot read a complex-valued dense constant by name (a TypeError):
    the key still tells two such constants apart, and the region search runs past them."""
    text = """
    sdy.mesh @mesh = <["x"=2, "y"=4]>
    func.func @main(%arg0: tensor<8x16xcomplex<f32>> {sdy.sharding = #sdy.sharding<@mesh, [{"x"}, {}]>},
                    %arg1: tensor<16x16xcomplex<f32>> {sdy.sharding = #sdy.sharding<@mesh, [{}, {"y"}]>})
        -> (tensor<8x16xcomplex<f32>>, tensor<8x16xcomplex<f32>>) {
      %a = stablehlo.constant dense<(0.5, 1.0)> : tensor<8x16xcomplex<f32>>
      %b = stablehlo.constant dense<(2.0, 0.0)> : tensor<8x16xcomplex<f32>>
      %0 = stablehlo.multiply %arg0, %a : tensor<8x16xcomplex<f32>>
      %1 = stablehlo.multiply %arg0, %b : tensor<8x16xcomplex<f32>>
      %2 = stablehlo.dot_general %0, %arg1, contracting_dims = [1] x [0]
          : (tensor<8x16xcomplex<f32>>, tensor<16x16xcomplex<f32>>) -> tensor<8x16xcomplex<f32>>
      return %2, %1 : tensor<8x16xcomplex<f32>>, tensor<8x16xcomplex<f32>>
    }
    """
    module = ir.Module.parse(text, make_context())
    with module.context:
        tag_ops(module.operation)
        reader = ModuleValues(module.operation, missing_as_replicated=True)
    constants = [op for op, name in enumerate(reader.graph.op_name) if name == "stablehlo.constant"]
    first, second = (structure_key(reader, [op], {}, {}) for op in constants)
    assert first != second
    regional = resolve_text(text, local_above=0)
    assert regional.final_bytes == resolve_text(text, local_above=10**9).final_bytes
