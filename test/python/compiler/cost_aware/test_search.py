"""The cost-aware search decides what it decided before its speed-ups.

``search_decisions.json`` holds each program's decisions (``bench/cost_aware_speed.py``'s
``decisions_of``: pins, predicted bytes and memory, evaluations, every decision
with what it tried), recorded before the search was made faster; a faster search
must decide exactly the same. ``python -m bench.cost_aware_speed --compare`` checks
every zoo program and the 128-layer transformer; this test checks programs that
take each path of the search: module rounds (best-first and program order),
region rounds with and without pins, and steady-state prices. Regenerate the
file with ``python -m bench.cost_aware_speed --record PATH`` only when a change
of decisions is intended.
"""

import json
import pathlib

import pytest
from jaxlib.mlir import ir

from bench import cost_aware_speed, e2e_measure, zoo
from bench.models import REGISTRY, REGRESSIONS
from shardc.compiler.cost import report
from shardc.compiler.cost_aware import pricing, regions
from shardc.compiler.cost_aware.candidates import conflict_points, tag_ops
from shardc.compiler.cost_aware.regions import imported_shardings, region_of, structure_key
from shardc.compiler.propagation import propagate
from shardc.compiler.propagation.values import ModuleValues
from shardc.compiler.stages import import_pipeline
from shardc.dialects import make_context

DECISIONS = json.loads((pathlib.Path(__file__).parent / "search_decisions.json").read_text())
PROGRAMS = {**zoo.REGISTRY, **REGISTRY, **REGRESSIONS}


@pytest.mark.parametrize("name", [
    "lm_linen_unconstrained",  # region rounds, a pin kept from steady-state prices
    "cnn_batchnorm",  # region rounds, a pin kept from a closed region
    "grad_loops_unrolled",  # region rounds, Shardy's choices kept
    "conflict_mlp_deep",  # every viable class at once (94 pins)
    "conflict_attention_seq",  # best-first module rounds
    "moe",  # module rounds, Shardy's choices kept
])
def test_decisions_unchanged(name):
    lower = cost_aware_speed.zoo_lowering(PROGRAMS[name]("small"))
    resolution = lower("cost-aware").cost_aware_resolution
    assert cost_aware_speed.decisions_of(resolution) == DECISIONS[name], (
        resolution.format_text())


def test_memoised_fingerprints_give_the_same_structure_keys():
    program = PROGRAMS["conflict_mlp_deep"]("small")
    jitted, args, _ = e2e_measure.prepare(program, "shardc")
    module = ir.Module.parse(jitted.lower(*args, propagate=False).as_text(), make_context())
    operation = module.operation
    with operation.context:
        import_pipeline(operation)
        tag_ops(operation)
        starts = imported_shardings(operation)
        propagate(operation, plan="user-priority", keep_sharding_rules=True)
    reader = ModuleValues(operation, missing_as_replicated=True)
    regions = [region_of(reader, [point.op], 128, 4) for point in conflict_points(reader)]
    shared: dict[int, tuple] = {}  # one memo over every (overlapping) region, as the search has
    memoised = [structure_key(reader, ops, starts, {}, shared) for ops in regions]
    assert memoised == [structure_key(reader, ops, starts, {}) for ops in regions]
    assert len(set(map(hash, memoised))) > 1


@pytest.mark.parametrize("name", [
    "moe",  # module rounds
    "conflict_attention_seq",  # best-first module rounds, a pin kept
    "cnn_batchnorm",  # region rounds, a pin kept
])
def test_decisions_unchanged_when_every_copy_is_repropagated(name, monkeypatch):
    """Every module and region copy re-propagated from a recorded one (not only those of
    modules of ``INCREMENTAL_OPS``): the same stores, so the same decisions."""
    monkeypatch.setattr(pricing, "INCREMENTAL_OPS", 0)
    lower = cost_aware_speed.zoo_lowering(PROGRAMS[name]("small"))
    resolution = lower("cost-aware").cost_aware_resolution
    assert cost_aware_speed.decisions_of(resolution) == DECISIONS[name], (
        resolution.format_text())


def test_a_program_leaving_ops_dead_is_searched_on_one_read(monkeypatch):
    """``grad_loops_unrolled`` leaves ops dead, which propagation erases: the pipeline
    erases them before the search, so every module copy the search prices is
    propagated on one shared read (only the baseline, written at once, and the
    winner's pins, written once, are cloned), deciding what it decided when each copy
    was cloned and read again."""
    cloned = []
    clone = pricing.PinnedCopies._pinned_clone
    monkeypatch.setattr(pricing.PinnedCopies, "_pinned_clone",
                        lambda copies, pins: cloned.append(list(pins)) or clone(copies, pins))
    lower = cost_aware_speed.zoo_lowering(PROGRAMS["grad_loops_unrolled"]("small"))
    resolution = lower("cost-aware").cost_aware_resolution
    assert cost_aware_speed.decisions_of(resolution) == DECISIONS["grad_loops_unrolled"]
    assert resolution.evaluations > 1 and cloned == [[], list(resolution.pins)]


@pytest.mark.parametrize("name", ["lm_scan_layers", "cnn_batchnorm"])
def test_every_candidate_priced_again_is_priced_as_alone(name, monkeypatch):
    """The search prices a candidate again from the copy without it where their
    shardings differ (``BytesByOp``, ``LiveSizes``): every such price is the one the
    candidate has priced alone, loops' carries (``lm_scan_layers``) included, and the
    search decides as before."""
    again = []

    def checked(method, whole):
        def priced_again(self, reader):
            found = method(self, reader)
            alone = ModuleValues(reader.graph.module, missing_as_replicated=True,
                                 read=(reader.graph, reader.store))
            again.append((found, whole(alone)))
            return found
        return priced_again

    monkeypatch.setattr(report.BytesByOp, "reprice",
                        checked(report.BytesByOp.reprice, report.collective_bytes))
    monkeypatch.setattr(pricing.LiveSizes, "peak_of",
                        checked(pricing.LiveSizes.peak_of, pricing.memory_peak))
    lower = cost_aware_speed.zoo_lowering(PROGRAMS[name]("small"))
    resolution = lower("cost-aware").cost_aware_resolution
    assert cost_aware_speed.decisions_of(resolution) == DECISIONS[name]
    assert again and all(found == alone for found, alone in again)


def test_the_module_is_laid_out_for_pricing_once(monkeypatch):
    """The baseline (propagated and written apart), the copies priced on the shared
    read and the states the search keeps have one graph but for shardings: the cost
    model's layout of the module (``ModuleValues.facts``) is derived once for all of
    them, and they decide what they decided when each derived its own."""
    sizes = []
    layout = report._bytes_layout
    monkeypatch.setattr(report, "_bytes_layout",
                        lambda reader: sizes.append(len(reader.graph.ops)) or layout(reader))
    lower = cost_aware_speed.zoo_lowering(PROGRAMS["cnn_batchnorm"]("small"))
    resolution = lower("cost-aware").cost_aware_resolution
    assert cost_aware_speed.decisions_of(resolution) == DECISIONS["cnn_batchnorm"]
    assert resolution.evaluations > 2 and resolution.pins
    module = max(sizes)
    assert sizes.count(module) == 1, sizes


def test_the_steady_state_bound_skips_only_candidates_that_cannot_be_verified(monkeypatch):
    """``grad_loops_unrolled`` has regions that cost nothing with their cut open: no pin
    there can gain, so the steady-state step skips those pins' propagations
    (``RegionEvaluator.steady_gain_bound``). Each skipped pin, priced after all, gains
    no more than its bound; with the bound disabled, the search decides, tries and
    returns exactly the same, with more region propagations."""
    lower = cost_aware_speed.zoo_lowering(PROGRAMS["grad_loops_unrolled"]("small"))
    lowered = lower("cost-aware")
    found = cost_aware_speed.decisions_of(lowered.cost_aware_resolution)
    assert found == DECISIONS["grad_loops_unrolled"]

    skipped = []
    bound_of, bounded = regions.RegionEvaluator.steady_gain_bound, regions.RegionEvaluator.bounded

    def priced_after_all(evaluator, seeds, pin):
        skipped.append((bound_of(evaluator, seeds, pin),
                        evaluator.steady_price(seeds, pin).gain))
        bounded(evaluator, seeds, pin)

    with monkeypatch.context() as patched:
        patched.setattr(regions.RegionEvaluator, "bounded", priced_after_all)
        checked = cost_aware_speed.decisions_of(lower("cost-aware").cost_aware_resolution)
    assert skipped and all(gain <= bound for bound, gain in skipped), skipped
    assert any(bound <= 0 for bound, _ in skipped)
    monkeypatch.setattr(regions.RegionEvaluator, "steady_gain_bound",
                        lambda evaluator, seeds, pin: 2 ** 62)  # never bounds
    unbounded = lower("cost-aware")
    everything = cost_aware_speed.decisions_of(unbounded.cost_aware_resolution)
    assert everything["evaluations"][1] > found["evaluations"][1]
    for decisions in (checked, everything):
        assert {**decisions, "evaluations": found["evaluations"]} == found
    assert unbounded.as_text() == lowered.as_text()
