"""Greedy cost-aware conflict resolution over Shardy-compatible propagation.

``resolve(imported)`` takes a module after the import steps (before
propagation), and:

1. propagates a copy with user priorities (Shardy-compatible) and predicts
   its collectives with the cost model (``comm_report``): the baseline
   bytes ``B0`` and per-device memory peak ``M0``;
2. walks the conflict points (``candidates.conflict_points``) in program
   order; at each, for every alternative pin, propagates a fresh copy of
   the imported module with the accepted pins plus that one, and predicts
   its bytes and memory peak;
3. keeps the cheapest alternative whose bytes are lower than the current
   best by more than ``margin`` and whose memory peak is not above ``M0``
   (ties keep Shardy's choice), then recomputes the conflict points of the
   new state and continues after that op.

Bounded: at most ``max_evaluations`` propagations + cost predictions in all
(default 32), each point offering at most ``per_point`` alternatives
(default 6). Deterministic: program order, fixed candidate order, strict
improvement. The accepted pins are returned; ``apply_pins`` writes them onto
a module as closed ``sdy.sharding`` attributes, so the propagated and
exported module carries them as explicit shardings XLA partitions exactly.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from jaxlib.mlir import ir

from shardc.compiler.cost.report import comm_report
from shardc.compiler.cost.reshard import dim_axes, shard_bytes
from shardc.compiler.cost.values import ModuleValues
from shardc.compiler.diagnostics import source_loc_of
from shardc.compiler.cost_aware.explicit import signatures
from shardc.compiler.cost_aware.candidates import TAG, ConflictPoint, Pin, conflict_points
from shardc.compiler.propagation import propagate
from shardc.compiler.propagation.sharding import format_per_value


@dataclass
class Decision:
    """One conflict point: what was tried, what it cost, what was kept."""

    op: int
    name: str
    location: str
    tried: list[tuple[str, int, int]]  # (why, predicted bytes, memory peak)
    chosen: str | None  # None: Shardy's choice kept


@dataclass
class Resolution:
    """The outcome: pins to apply and the log of the search."""

    pins: list[Pin]
    baseline_bytes: int
    final_bytes: int
    baseline_memory: int
    final_memory: int
    evaluations: int
    seconds: float
    decisions: list[Decision] = field(default_factory=list)
    changed: set[int] = field(default_factory=set)  # tags of ops whose shardings changed
    reshards: int = 0  # explicit operand reshards inserted at export

    def format_text(self) -> str:
        lines = [f"cost-aware: {self.baseline_bytes} -> {self.final_bytes} bytes/device "
                 f"predicted, memory peak {self.baseline_memory} -> {self.final_memory}, "
                 f"{self.evaluations} evaluations, {self.seconds:.3f}s"]
        for d in self.decisions:
            lines.append(f"  {d.name} at {d.location}: kept {d.chosen or 'shardy'}")
            for why, cost, memory in d.tried:
                lines.append(f"    {why:<34} {cost:>10} bytes  peak {memory}")
        return "\n".join(lines)


def apply_pins(module: ir.Operation, pins: list[Pin]) -> None:
    """Write each pin as the closed ``sdy.sharding`` of its op (graph indices of ``module``)."""
    if not pins:
        return
    wanted = {pin.op: pin for pin in pins}

    def visit(op: ir.Operation) -> ir.WalkResult:
        if TAG in op.attributes:
            pin = wanted.get(ir.IntegerAttr(op.attributes[TAG]).value)
            if pin is not None:
                op.attributes["sdy.sharding"] = ir.Attribute.parse(
                    format_per_value([pin.sharding]))
        return ir.WalkResult.ADVANCE

    module.walk(visit)


def memory_peak(reader: ModuleValues) -> int:
    """Per-device bytes live at the worst point of program (pre-order) order.

    A value is live from its definition (block arguments: from the start of
    the program) to its last use; tensors count their shard bytes.
    """
    graph = reader.graph
    n = len(graph.ops)
    delta = [0] * (n + 2)
    for value in range(len(graph.values)):
        tensor = reader.tensor(value)
        if tensor is None:
            continue
        sharding = tensor.sharding
        size = (shard_bytes(tensor.shape, tensor.element_bytes,
                            dim_axes(sharding, len(tensor.shape)))
                if sharding is not None else tensor.global_bytes)
        start = graph.value_def[value] if graph.value_def[value] >= 0 else 0
        uses = [user for user, _ in graph.uses[value]]
        end = max(uses, default=start)
        delta[start] += size
        delta[end + 1] -= size
    peak = live = 0
    for step in delta:
        live += step
        peak = max(peak, live)
    return peak


def _location(op: ir.Operation) -> str:
    loc = source_loc_of(op.location)
    return f"{loc.file.rsplit('/', 1)[-1]}:{loc.line}" if loc else "unknown"


class _Evaluator:
    def __init__(self, imported: ir.Operation, conservative: bool):
        self.imported = imported
        self.conservative = conservative
        self.count = 0

    def __call__(self, pins: list[Pin]) -> tuple[int, int, ModuleValues]:
        self.count += 1
        copy = self.imported.clone()
        with copy.context:
            apply_pins(copy.operation, pins)
            propagate(copy.operation, strategy="user-priority", conservative=self.conservative,
                      keep_sharding_rules=True)
        report = comm_report(copy.operation, missing_as_replicated=True)
        total = sum(e.bytes_per_device for e in report.entries)
        reader = ModuleValues(copy.operation, missing_as_replicated=True)
        return total, memory_peak(reader), reader


def resolve(imported: ir.Operation, *, conservative: bool = False, max_evaluations: int = 32,
            per_point: int = 6, margin: int = 0) -> Resolution:
    """Search the pins for ``imported`` (after the import steps); see the module docstring."""
    start = time.perf_counter()
    evaluate = _Evaluator(imported, conservative)
    best_bytes, base_memory, reader = evaluate([])
    baseline_reader = reader
    baseline = best_bytes
    best_memory = base_memory
    pins: list[Pin] = []
    decisions: list[Decision] = []
    after = -1
    while evaluate.count < max_evaluations:
        point = _next_point(conflict_points(reader, per_point=per_point), after)
        if point is None:
            break
        after = point.tag
        pinned_ops = {p.op for p in pins}
        here = reader.graph.ops[point.op]
        tried = []
        winner = None
        for pin in point.alternatives:
            if pin.op in pinned_ops or evaluate.count >= max_evaluations:
                continue
            cost, memory, candidate = evaluate(pins + [pin])
            tried.append((pin.why, cost, memory))
            if memory <= base_memory and cost + margin < best_bytes:
                best_bytes, best_memory, winner = cost, memory, (pin, candidate)
        chosen = None
        if winner is not None:
            pins.append(winner[0])
            reader = winner[1]
            chosen = winner[0].why
        decisions.append(Decision(point.op, point.name, _location(here), tried, chosen))
    before = signatures(baseline_reader)
    changed = {tag for tag, sig in signatures(reader).items() if before.get(tag) != sig}
    return Resolution(pins, baseline, best_bytes, base_memory, best_memory, evaluate.count,
                      time.perf_counter() - start, decisions, changed if pins else set())


def _next_point(points: list[ConflictPoint], after: int) -> ConflictPoint | None:
    return next((p for p in points
                 if p.tag is not None and p.tag > after and p.alternatives), None)
