"""Greedy cost-aware conflict resolution over Shardy-compatible propagation.

``resolve(imported)`` takes a module after the import steps (before
propagation), and:

1. propagates a copy with user priorities (Shardy-compatible) and predicts
   its collectives with the cost model (``comm_report``): the baseline
   bytes ``B0`` and per-device memory peak ``M0``;
2. **best-first rounds**: while every alternative pin of every open conflict
   point (``candidates.conflict_points``) fits in the evaluations left, it
   propagates a fresh copy of the imported module with the accepted pins plus
   each one, predicts its bytes and memory peak, and accepts the single best
   one over all points (then recomputes the points of the new state);
3. otherwise (too many alternatives left for a round, e.g.
   ``fsdp_train_step``) it walks the remaining points in program order and,
   at each, keeps the cheapest alternative;
4. in both, a pin is kept only if its bytes are lower than the current best
   by more than ``margin`` and its memory peak is not above ``M0`` (ties keep
   Shardy's choice).

A candidate's bytes are ``comm_report``'s plus ``returned_in_declared_layout``:
an op the candidate changes gets explicit operand reshards at export, and when
its result is resharded again at ``func.return`` XLA may compute the op in the
returned layout instead (so a predicted saving compiled to more bytes than
Shardy); the op is priced at the worse of the two routes.

Bounded: at most ``max_evaluations`` propagations + cost predictions in all
(default 32), each point offering at most ``per_point`` alternatives
(default 6). Deterministic: fixed point and candidate order, strict
improvement. The accepted pins are returned; ``apply_pins`` writes them onto
a module as closed ``sdy.sharding`` attributes, so the propagated and
exported module carries them as explicit shardings XLA partitions exactly.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from jaxlib.mlir import ir

from shardc.compiler.cost.op_comm import Tensor, op_communication
from shardc.compiler.cost.report import comm_report
from shardc.compiler.cost.reshard import dim_axes, reshard_collectives, shard_bytes
from shardc.compiler.cost.values import ModuleValues
from shardc.compiler.diagnostics import source_loc_of
from shardc.compiler.cost_aware.explicit import signatures
from shardc.compiler.cost_aware.candidates import (
    TAG, Pin, closed, conflict_points, tag_of)
from shardc.compiler.propagation import propagate
from shardc.compiler.propagation.sharding import format_per_value
from shardc.compiler.sharding.rules import rule_for


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


def _collective_bytes(collectives) -> int:
    return sum(c.bytes_per_device for c in collectives)


def returned_in_declared_layout(reader: ModuleValues, changed: set[int]) -> int:
    """Extra bytes if XLA computes each changed op returned in another layout in the declared one.

    A changed op gets explicit operand reshards at export (``explicit``), but
    when its result is resharded again at ``func.return``, XLA may compute the
    op directly in the returned layout from the explicitly resharded operands
    (then gathering another operand) instead of computing it as exported and
    resharding the result (found on the mismatched MLP and an FSDP pair: a
    predicted saving compiled to more bytes than Shardy). So the op is priced
    both ways: (a) as exported plus the return reshard (``comm_report``), and
    (b) operands resharded as exported, then the op with the declared result
    sharding, no return reshard. The sum of the positive ``(b) - (a)`` over
    those ops is returned; the search prices a candidate at the worse of the two.
    """
    if not changed:
        return 0
    graph, store = reader.graph, reader.store
    extra = 0
    for ret in range(len(graph.ops)):
        if graph.op_name[ret] != "func.return":
            continue
        parent = graph.op_parent[ret]
        if graph.op_name[parent] != "func.func":
            continue
        results = store.func_results[parent]
        seen = set()
        for k, value in enumerate(graph.op_operands[ret]):
            op = graph.value_def[value]
            if (op < 0 or op in seen or k >= len(results) or tag_of(reader, op) not in changed
                    or len(graph.op_results[op]) != 1 or graph.op_blocks[op]):
                continue
            rule = rule_for(graph.ops[op])
            declared = store.value[results[k]]
            result = reader.tensor(value)
            operands = [reader.tensor(v) for v in graph.op_operands[op]]
            if (rule is None or declared is None or result is None or result.sharding is None
                    or any(t is None or t.sharding is None for t in operands)):
                continue
            if dim_axes(declared, len(result.shape)) == dim_axes(result.sharding,
                                                                   len(result.shape)):
                continue
            seen.add(op)
            mesh = reader.mesh_of(result.sharding, *(t.sharding for t in operands))
            needs = op_communication(rule, operands, [result], mesh)
            exported = _collective_bytes(n.collective for n in needs)
            exported += _collective_bytes(reshard_collectives(
                result.shape, result.element_bytes, result.sharding, declared,
                reader.mesh_of(result.sharding, declared)))
            resharded = list(operands)
            explicit = 0
            for need in needs:
                if need.operand is not None and need.target is not None:
                    t = operands[need.operand]
                    resharded[need.operand] = Tensor(t.shape, t.element_bytes,
                                                     closed(t.sharding.mesh, need.target))
                    explicit += need.collective.bytes_per_device
            direct = Tensor(result.shape, result.element_bytes, declared)
            again = op_communication(rule, resharded, [direct],
                                     reader.mesh_of(declared, *(t.sharding for t in resharded)))
            in_declared = explicit + _collective_bytes(n.collective for n in again)
            extra += max(0, in_declared - exported)
    return extra


class _Evaluator:
    def __init__(self, imported: ir.Operation, conservative: bool):
        self.imported = imported
        self.conservative = conservative
        self.count = 0
        self.baseline: dict[int, tuple] | None = None

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
        if self.baseline is None:
            self.baseline = signatures(reader)
        elif pins:
            total += returned_in_declared_layout(reader, changed_tags(self.baseline, reader))
        return total, memory_peak(reader), reader


def changed_tags(baseline: dict[int, tuple], reader: ModuleValues) -> set[int]:
    """Tags of the ops whose operand/result shardings differ from the baseline's."""
    return {tag for tag, sig in signatures(reader).items() if baseline.get(tag) != sig}


def resolve(imported: ir.Operation, *, conservative: bool = False, max_evaluations: int = 32,
            per_point: int = 6, margin: int = 0, best_first: bool = True) -> Resolution:
    """Search the pins for ``imported`` (after the import steps); see the module docstring."""
    start = time.perf_counter()
    evaluate = _Evaluator(imported, conservative)
    best_bytes, base_memory, reader = evaluate([])
    baseline_reader = reader
    baseline = best_bytes
    best_memory = base_memory
    pins: list[Pin] = []
    decisions: list[Decision] = []
    decided: set[int] = set()
    after = -1
    while evaluate.count < max_evaluations:
        open_points = [p for p in conflict_points(reader, per_point=per_point)
                       if p.tag is not None and p.alternatives and p.tag not in decided]
        if not open_points:
            break
        pinned_ops = {p.op for p in pins}
        round_size = sum(1 for p in open_points for pin in p.alternatives
                         if pin.op not in pinned_ops)
        if best_first and round_size <= max_evaluations - evaluate.count:
            # Best-first round: every open alternative, keep the single best one.
            logs, winner = [], None
            for point in open_points:
                tried = []
                for pin in point.alternatives:
                    if pin.op in pinned_ops:
                        continue
                    cost, memory, candidate = evaluate(pins + [pin])
                    tried.append((pin.why, cost, memory))
                    if memory <= base_memory and cost + margin < best_bytes:
                        best_bytes, best_memory = cost, memory
                        winner = (point, pin, candidate)
                logs.append((point, tried))
            if winner is None:
                for point, tried in logs:
                    decisions.append(Decision(point.op, point.name,
                                              _location(reader.graph.ops[point.op]), tried, None))
                break
            point, pin, candidate = winner
            tried = next(t for p, t in logs if p is point)
            decisions.append(Decision(point.op, point.name, _location(reader.graph.ops[point.op]),
                                      tried, pin.why))
            decided.add(point.tag)
            pins.append(pin)
            reader = candidate
            continue
        best_first = False  # too many alternatives left for a round: program order from here
        point = next((p for p in open_points if p.tag > after), None)
        if point is None:
            break
        after = point.tag
        decided.add(point.tag)
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
    changed = changed_tags(signatures(baseline_reader), reader)
    return Resolution(pins, baseline, best_bytes, base_memory, best_memory, evaluate.count,
                      time.perf_counter() - start, decisions, changed if pins else set())
