"""Greedy cost-aware conflict resolution over Shardy-compatible propagation.

``resolve(imported)`` takes a module after the import steps (before
propagation) and first propagates a copy with user priorities
(Shardy-compatible), pricing it with the cost model (``pricing.price``):
the baseline bytes ``B0`` and per-device memory peak ``M0``. Then, for a
module of at most ``local_above`` ops, **module rounds**:

1. *best-first*: while every alternative pin of every open conflict point
   (``candidates.conflict_points``) fits in the evaluations left, propagate
   a fresh copy of the imported module with the accepted pins plus each one,
   price it, and accept the single best one over all points (then recompute
   the points of the new state);
2. otherwise (too many alternatives left for a round, e.g.
   ``fsdp_train_step``) walk the remaining points in program order and, at
   each, keep the cheapest alternative.

A larger module gets **region rounds** instead (``regions``): every
alternative is priced on a region of at most ``region_ops`` ops around its
conflict point, memoised by structure, so a repeated layer costs one region
propagation, not one module propagation per layer. Candidates that are the
same pin in the same structure form a class. Every viable class (local gain,
no higher local memory peak) is applied at once, one pin per point, and
verified on the whole module; if that fails, the class with the largest
total local gain alone, then its first point alone; a class that fails all
is dropped. When no class gains on its region, the classes are ranked by
their *steady-state* gain instead (the region with its cut open, so the
values crossing it settle with the pin: ``RegionEvaluator.steady_price``)
and verified on the module one class at a time, best first, while
verifications last: a pin that re-settles a whole chain of values (the
residual stream of a language model moved off the FSDP axis) only moves a
reshard to a closed cut.

In both, a pin is kept only if its bytes are lower than the current best by
more than ``margin`` and its memory peak is not above ``M0`` (ties keep
Shardy's choice). A candidate's module-wide bytes include
``pricing.returned_in_declared_layout``.

Bounded: at most ``max_evaluations`` module propagations (default 32; region
rounds use at most ``max_verifications`` of them, default 4, after the
baseline) and ``max_region_evaluations`` region propagations of at most
``region_ops`` ops (default 64 of 128), plus as many steady-state ones
(``max_steady_evaluations``), each point offering at most
``per_point`` alternatives (default 6). Deterministic: fixed point, class
and candidate order, strict improvement. The accepted pins are returned;
``apply_pins`` writes them onto a module as closed ``sdy.sharding``
attributes, so the exported module carries them as explicit shardings XLA
partitions exactly; ``Resolution.read`` is the winner already propagated.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from jaxlib.mlir import ir

from shardc.compiler.cost_aware.candidates import ConflictPoint, Pin, conflict_points, op_tags
from shardc.compiler.cost_aware.pricing import ModuleEvaluator, write_back
from shardc.compiler.cost_aware.regions import LocalPrice, RegionEvaluator
from shardc.compiler.diagnostics import source_loc_of
from shardc.compiler.propagation import cyclic_gc_paused
from shardc.compiler.propagation.values import ModuleValues
from shardc.compiler.stages import PropagatedRead
from shardc.compiler.stages.export_steps import closed
from shardc.dialects import sdy
from shardc.dialects.sdy import SHARDING_ATTR


@dataclass
class Decision:
    """One conflict point (or class of repeated ones): what was tried, what was kept."""

    op: int
    name: str
    location: str
    tried: list[tuple[str, int, int]]  # (why, predicted bytes, memory peak)
    chosen: str | None  # None: Shardy's choice kept
    scope: str = "module"  # what ``tried`` prices: the module, or "region of N ops"
    points: int = 1  # conflict points the decision covers (a class of repeated ones)


@dataclass
class Resolution:
    """The outcome: pins to apply, the propagated winner and the log of the search."""

    pins: list[Pin]
    baseline_bytes: int
    final_bytes: int
    baseline_memory: int
    final_memory: int
    evaluations: int  # module propagations
    seconds: float
    decisions: list[Decision] = field(default_factory=list)
    changed: set[int] = field(default_factory=set)  # tags of ops whose shardings changed
    reshards: int = 0  # explicit operand reshards inserted at export
    region_evaluations: int = 0  # region propagations (region rounds only)
    # The imported module propagated with ``pins``, as the read the propagation wrote
    # it from (its ``graph.module``), which the export takes its census from.
    read: PropagatedRead | None = None
    baseline_read: PropagatedRead | None = None  # propagated without pins (when pins)
    # Exports Shardy's choices when first called (when pins): ``fallback``.
    shardy_export: Callable[[], bytes] | None = field(default=None, repr=False)

    @property
    def fallback(self) -> bytes | None:
        """Shardy's choices exported, as bytecode (when pins; exported when first asked):
        ``Lowered.compile`` compiles both and keeps whichever XLA partitions with fewer
        collective bytes or in less memory."""
        return None if self.shardy_export is None else self.shardy_export()

    def format_text(self) -> str:
        lines = [f"cost-aware: {self.baseline_bytes} -> {self.final_bytes} bytes/device "
                 f"predicted, memory peak {self.baseline_memory} -> {self.final_memory}, "
                 f"{self.evaluations} evaluations, {self.region_evaluations} region "
                 f"evaluations, {self.seconds:.3f}s"]
        for d in self.decisions:
            where = "" if d.points == 1 else f" (and {d.points - 1} more like it)"
            lines.append(f"  {d.name} at {d.location}{where}: kept {d.chosen or 'shardy'}")
            for why, cost, memory in d.tried:
                lines.append(f"    {why:<34} {cost:>10} bytes  peak {memory}  [{d.scope}]")
        return "\n".join(lines)


def _location(op: ir.Operation) -> str:
    loc = source_loc_of(op.location)
    return f"{loc.file.rsplit('/', 1)[-1]}:{loc.line}" if loc else "unknown"


@dataclass
class _Class:
    """Candidates that are the same pin in the same structure: one local price."""

    price: LocalPrice
    members: list[tuple[ConflictPoint, Pin]]


def declare_returned_shardings(imported: ir.Operation, baseline: ModuleValues) -> None:
    """Give the results the program leaves open the (closed) shardings Shardy gives them.

    shardc is a drop-in for ``jax.jit``: the search may change how values are
    sharded inside the program, never the layout of what it returns (a return
    reshard is priced instead). The baseline's bytes are unchanged by it.
    """
    mesh = next(iter(baseline.meshes), None)
    for name, op in baseline.funcs.items():
        target = next((f.operation for f in imported.regions[0].blocks[0].operations
                       if f.operation.name == "func.func"
                       and ir.StringAttr(f.operation.attributes["sym_name"]).value == name), None)
        source = baseline.graph.ops[op]
        if target is None or mesh is None:
            continue
        results = ir.FunctionType(ir.TypeAttr(source.attributes["function_type"]).value).results
        given = (list(ir.ArrayAttr(target.attributes["res_attrs"]))
                 if "res_attrs" in target.attributes else [])
        decided = (list(ir.ArrayAttr(source.attributes["res_attrs"]))
                   if "res_attrs" in source.attributes else [])
        entries = []
        for k, result_type in enumerate(results):
            values = _entries(given[k]) if k < len(given) else {}
            if SHARDING_ATTR not in values and isinstance(result_type, ir.RankedTensorType):
                sharding = _entries(decided[k]).get(SHARDING_ATTR) if k < len(decided) else None
                # Propagation leaves a replicated result without a sharding.
                values[SHARDING_ATTR] = (closed(sdy.TensorShardingAttr(sharding)) if sharding
                                    is not None else _replicated(mesh, result_type.rank))
            entries.append(ir.DictAttr.get(values, context=target.context))
        target.attributes["res_attrs"] = ir.ArrayAttr.get(entries, context=target.context)


def _replicated(mesh: str, rank: int) -> ir.Attribute:
    dims = ", ".join(["{}"] * rank)
    return ir.Attribute.parse(f"#sdy.sharding<@{mesh}, [{dims}]>")


def _entries(attr: ir.Attribute) -> dict[str, ir.Attribute]:
    d = ir.DictAttr(attr)
    return {d[i].name: d[i].attr for i in range(len(d))}


class _Search:
    def __init__(self, imported: ir.Operation, *, conservative: bool, max_evaluations: int,
                 per_point: int, margin: int):
        self.evaluate = ModuleEvaluator(imported, conservative)
        self.imported = imported
        self.conservative = conservative
        self.max_evaluations = max_evaluations
        self.per_point = per_point
        self.margin = margin
        self.best_bytes, self.base_memory, self.reader = self.evaluate([])
        declare_returned_shardings(imported, self.reader)
        self.baseline_reader = self.reader
        self.baseline_bytes = self.best_bytes
        self.best_memory = self.base_memory
        self.pins: list[Pin] = []
        self.decisions: list[Decision] = []
        self.decided: set[int] = set()
        self.regions: RegionEvaluator | None = None
        self.verifications_left = 0  # module verifications region rounds may still run
        # (reader, its conflict points): those of the current state, once found.
        self._points: tuple[ModuleValues | None, list[ConflictPoint]] = (None, [])

    # ------------------------------------------------------------- common
    def open_points(self) -> list[ConflictPoint]:
        # The points of a state are asked for again by every round that keeps nothing.
        if self._points[0] is not self.reader:
            self._points = (self.reader, conflict_points(self.reader, per_point=self.per_point))
        return [p for p in self._points[1]
                if p.tag is not None and p.alternatives and p.tag not in self.decided]

    def better(self, cost: int, memory: int) -> bool:
        return memory <= self.base_memory and cost + self.margin < self.best_bytes

    def accept(self, pins: list[Pin], cost: int, memory: int, reader: ModuleValues) -> None:
        write_back(reader)  # the new state: regions are cut out of its module, or it is kept
        self.pins.extend(pins)
        self.evaluate.rebase()  # later candidates add to these pins
        self.best_bytes, self.best_memory, self.reader = cost, memory, reader

    def decide(self, point: ConflictPoint, tried, chosen, **extra) -> None:
        self.decided.add(point.tag)
        self.decisions.append(Decision(point.op, point.name,
                                       _location(self.reader.graph.ops[point.op]),
                                       tried, chosen, **extra))

    # ------------------------------------------------------ module rounds
    def module_rounds(self, best_first: bool = True) -> None:
        after = -1
        while self.evaluate.count < self.max_evaluations:
            points = self.open_points()
            if not points:
                return
            pinned = {p.op for p in self.pins}
            size = sum(1 for p in points for pin in p.alternatives if pin.op not in pinned)
            if best_first and size <= self.max_evaluations - self.evaluate.count:
                if not self._best_first_round(points, pinned):
                    return
                continue
            best_first = False  # too many alternatives left for a round: program order
            point = next((p for p in points if p.tag > after), None)
            if point is None:
                return
            after = point.tag
            self._program_order_step(point, pinned)

    def _best_first_round(self, points: list[ConflictPoint], pinned: set[int]) -> bool:
        """Try every open alternative, accept the single best; False when none helps."""
        logs, winner = [], None
        best = (self.best_bytes, self.best_memory)
        for point in points:
            tried = []
            for pin in point.alternatives:
                if pin.op in pinned:
                    continue
                cost, memory, candidate = self.evaluate(self.pins + [pin])
                tried.append((pin.why, cost, memory))
                if memory <= self.base_memory and cost + self.margin < best[0]:
                    best = (cost, memory)
                    winner = (point, pin, candidate)
            logs.append((point, tried))
        if winner is None:
            for point, tried in logs:
                self.decide(point, tried, None)
            return False
        point, pin, candidate = winner
        self.decide(point, next(t for p, t in logs if p is point), pin.why)
        self.accept([pin], *best, candidate)
        return True

    def _program_order_step(self, point: ConflictPoint, pinned: set[int]) -> None:
        tried, winner = [], None
        best = (self.best_bytes, self.best_memory)
        for pin in point.alternatives:
            if pin.op in pinned or self.evaluate.count >= self.max_evaluations:
                continue
            cost, memory, candidate = self.evaluate(self.pins + [pin])
            tried.append((pin.why, cost, memory))
            if memory <= self.base_memory and cost + self.margin < best[0]:
                best, winner = (cost, memory), (pin, candidate)
        self.decide(point, tried, winner[0].why if winner else None)
        if winner is not None:
            self.accept([winner[0]], *best, winner[1])

    # ------------------------------------------------------ region rounds
    def region_rounds(self, region_ops: int, region_radius: int, max_region_evaluations: int,
                      max_verifications: int, max_steady_evaluations: int = 0) -> None:
        self.regions = RegionEvaluator(self.imported, limit=region_ops, radius=region_radius,
                                       conservative=self.conservative,
                                       costs=self.evaluate.costs, tagged=self.evaluate.tagged)
        rejected: set[tuple] = set()  # pins (Pin.key) a module verification refused
        self.verifications_left = max_verifications
        steady_left = max_steady_evaluations
        while self.verifications_left > 0:
            classes, groups = self._region_classes(max_region_evaluations, rejected)
            viable = [c for c in classes
                      if c.price.gain > 0 and c.price.memory <= c.price.base_memory]
            if not viable:
                accepted, logged, spent = self._steady_state_step(groups, steady_left, rejected)
                steady_left -= spent
                if accepted:
                    continue
                for group in classes:
                    if group.members[0][1].key() not in logged:
                        self._decide_class(group, None, [])
                return
            # Largest total gain first (sorted is stable: the earliest class wins ties).
            ranked = sorted(viable, key=lambda c: c.price.gain * len(c.members), reverse=True)
            group = ranked[0]
            trials = [[(group, group.members)]]
            if len(group.members) > 1:
                trials.append([(group, group.members[:1])])
            combined = _combine(ranked)
            if len(combined) > 1:  # every viable class at once first: one verification
                trials.insert(0, combined)
            verified = []
            for trial in trials:
                if self.verifications_left == 0:
                    break
                self.verifications_left -= 1
                pins = list({pin.op: pin for _, members in trial for _, pin in members}.values())
                cost, memory, candidate = self.evaluate(self.pins + pins)
                verified.append((f"{len(pins)} pin(s), {len(trial)} class(es), on the module",
                                 cost, memory))
                if self.better(cost, memory):
                    self.accept(pins, cost, memory, candidate)
                    for kept, members in trial:
                        self._decide_class(kept, kept.members[0][1].why, verified, members)
                    break
            else:
                rejected.update(pin.key() for _, pin in group.members)
                self._decide_class(group, None, verified, [])

    def _steady_state_step(self, groups: list[list[tuple[ConflictPoint, Pin, tuple]]],
                           budget: int, rejected: set[tuple]) -> tuple[bool, set[tuple], int]:
        """When no class gains on its closed region: rank the classes by their steady-state
        gain (``RegionEvaluator.steady_price``, most repeated first while ``budget``
        region propagations last) and verify them on the module, best total gain first,
        while verifications last; keep the first the module finds cheaper.

        A closed region prices a pin that re-settles a whole chain of values (a
        residual stream moved off the FSDP axis) as a reshard at the cut, so no
        class looks viable there; its steady-state price does show the gain, and
        the module verification is the authority. Returns whether a class was
        kept, the first pins (``Pin.key``) of the classes it logged and the budget
        it spent.

        Only the verifications left are run, so only that many classes of the ranking
        matter: a class whose gain is bounded (``steady_gain_bound``) by no more than
        the last of the best found so far, or by nothing, cannot enter it and its pin
        is not propagated. It is charged to ``budget`` as if it were
        (``RegionEvaluator.bounded``), so the bound changes what is propagated, never
        which classes are considered.
        """
        start = self.regions.steady_charged
        ranked = []
        best: list[int] = []  # the largest total gains ranked, at most verifications left
        for members in groups:
            point, pin, seeds = members[0]
            if pin.key() in rejected:
                continue
            if (self.regions.steady_charged - start >= budget
                    and not self.regions.is_cached(seeds, pin, open_cut=True)):
                continue
            bound = self.regions.steady_gain_bound(seeds, pin) * len(members)
            # A later class that ties the last of the best ranks after it (a stable sort).
            if bound <= 0 or (best and len(best) == self.verifications_left
                              and bound <= best[-1]):
                self.regions.bounded(seeds, pin)
                continue
            price = self.regions.steady_price(seeds, pin)
            if price.gain > 0 and price.memory <= price.base_memory:
                ranked.append(_Class(price, [(p, q) for p, q, _ in members]))
                best = sorted([*best, price.gain * len(members)],
                              reverse=True)[:self.verifications_left]
        ranked.sort(key=lambda c: c.price.gain * len(c.members), reverse=True)
        spent = self.regions.steady_charged - start
        logged: set[tuple] = set()
        for group in ranked:
            if self.verifications_left == 0:
                break
            self.verifications_left -= 1
            pins = list({pin.op: pin for _, pin in group.members}.values())
            cost, memory, candidate = self.evaluate(self.pins + pins)
            verified = [(f"{len(pins)} pin(s), 1 class, on the module", cost, memory)]
            logged.add(group.members[0][1].key())
            scope = f"steady state of a region of <= {self.regions.limit} ops"
            if self.better(cost, memory):
                self.accept(pins, cost, memory, candidate)
                self._decide_class(group, group.members[0][1].why, verified, group.members,
                                   scope=scope)
                return True, logged, spent
            rejected.update(pin.key() for _, pin in group.members)
            self._decide_class(group, None, verified, [], scope=scope)
        return False, logged, spent

    def _region_classes(self, max_region_evaluations: int, rejected: set[tuple]
                        ) -> tuple[list[_Class], list[list[tuple[ConflictPoint, Pin, tuple]]]]:
        """Every open alternative priced on its region, grouped by structure (program order);
        also every group of candidates, priced or not (``(point, pin, seeds)``, the most
        repeated first)."""
        index_of = {tag: op for op, tag in enumerate(op_tags(self.reader.facts,
                                                             self.reader.graph))}
        index_of.pop(None, None)
        self.regions.set_state(self.reader, self.pins)
        pinned = {p.op for p in self.pins}
        groups: dict[tuple, list[tuple[ConflictPoint, Pin, tuple[int, ...]]]] = {}
        for point in self.open_points():
            for pin in point.alternatives:
                if pin.op in pinned or pin.key() in rejected:
                    continue
                seeds = tuple(sorted({point.op, index_of[pin.op]}))
                groups.setdefault(self.regions.key_of(seeds, pin), []).append((point, pin, seeds))
        # The most repeated structures first: the evaluation budget goes where it
        # serves the most points (sorted is stable: program order among equals).
        classes = []
        ordered = sorted(groups.values(), key=len, reverse=True)
        for members in ordered:
            point, pin, seeds = members[0]
            if (self.regions.count - self.regions.steady_count >= max_region_evaluations
                    and not self.regions.is_cached(seeds, pin)):
                continue
            classes.append(_Class(self.regions.price_pin(seeds, pin),
                                  [(p, q) for p, q, _ in members]))
        return classes, ordered

    def _decide_class(self, group: _Class, chosen: str | None, verified: list,
                      accepted: list[tuple[ConflictPoint, Pin]] | None = None,
                      scope: str | None = None) -> None:
        """Log a class; the points of ``accepted`` members are decided (not offered again)."""
        point, pin = group.members[0]
        local = group.price
        tried = [("shardy", local.base_bytes, local.base_memory),
                 (pin.why, local.bytes, local.memory), *verified]
        for member, _ in accepted or []:
            self.decided.add(member.tag)
        self.decisions.append(Decision(
            point.op, point.name, _location(self.reader.graph.ops[point.op]), tried, chosen,
            scope=scope or f"region of <= {self.regions.limit} ops", points=len(group.members)))

    def resolution(self, start: float) -> Resolution:
        # The evaluator kept the baseline's signatures (its first evaluation).
        changed = self.evaluate.changed(self.reader) if self.pins else set()
        return Resolution(self.pins, self.baseline_bytes, self.best_bytes, self.base_memory,
                          self.best_memory, self.evaluate.count, time.perf_counter() - start,
                          self.decisions, changed,
                          region_evaluations=self.regions.count if self.regions else 0,
                          read=_written_read(self.reader),
                          baseline_read=_written_read(self.baseline_reader) if self.pins
                          else None)


def _written_read(reader: ModuleValues) -> PropagatedRead:
    """The graph and store of a reader the search wrote back (``ModuleValues.write_back``,
    with the rules its propagation used): what a walk of its module would read."""
    return PropagatedRead(reader.graph, reader.store, rules_kept=True)


def _combine(ranked: list[_Class]) -> list[tuple[_Class, list[tuple[ConflictPoint, Pin]]]]:
    """The viable classes, best first, each with its members on points (and ops) that
    no better class already pins: one pin per point, one pin per op."""
    covered: set[int] = set()
    pinned: set[int] = set()
    out = []
    for group in ranked:
        members = [(point, pin) for point, pin in group.members
                   if point.tag not in covered and pin.op not in pinned]
        if members:
            out.append((group, members))
            covered.update(point.tag for point, _ in members)
            pinned.update(pin.op for _, pin in members)
    return out


def resolve(imported: ir.Operation, *, conservative: bool = False, max_evaluations: int = 32,
            per_point: int = 6, margin: int = 0, best_first: bool = True,
            local_above: int | None = None, region_ops: int = 128, region_radius: int = 4,
            max_region_evaluations: int = 64, max_verifications: int = 4,
            max_steady_evaluations: int = 64) -> Resolution:
    """Search the pins for ``imported`` (after the import steps); see the module docstring.

    Module rounds up to ``local_above`` ops; by default while their worst case
    (``max_evaluations`` propagations of the module) costs no more than the
    region rounds' (``max_region_evaluations`` of ``region_ops`` ops): 256 ops.
    """
    start = time.perf_counter()
    if local_above is None:
        local_above = max_region_evaluations * region_ops // max(1, max_evaluations)
    # The search keeps many small tuples alive (readers, keys, memos) until its end.
    with cyclic_gc_paused():
        search = _Search(imported, conservative=conservative, max_evaluations=max_evaluations,
                         per_point=per_point, margin=margin)
        if len(search.reader.graph.ops) <= local_above:
            search.module_rounds(best_first)
        else:
            search.region_rounds(region_ops, region_radius, max_region_evaluations,
                                 min(max_verifications, max_evaluations - 1),
                                 max_steady_evaluations)
        resolution = search.resolution(start)
        # Dropped before collection resumes: still alive then, all the search
        # allocated would be scanned by the first collection.
        del search
    return resolution
