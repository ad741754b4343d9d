"""Offline check of the cost-aware greedy search: the exact optimum.

Not the product path. For each small program, the same per-conflict-point
choices the greedy search (``compiler/cost_aware/search.py``) has: every
conflict point of the Shardy-compatible baseline plus every point the greedy
search decided on, each with "keep Shardy's choice" or one of its
alternatives (pins). The cost of a choice is the search's own predicted
bytes (``pricing.ModuleEvaluator``: one re-propagation + ``comm_report`` + the
return-layout term), and a choice whose memory peak is above the baseline's
is infeasible, as in the greedy search.

Interactions between points make the cost non-separable, so the ILP
(``scipy.optimize.milp``) has one binary ``x[p, a]`` per (point,
alternative), one-hot per point (the "Shardy" alternative included), and the
cost *linearised pairwise*: unary terms ``c(a) - c(0)`` from single-pin
evaluations, and for every pair of pins on different points a binary
``y >= x[p, a] + x[q, b] - 1`` weighted ``c(a, b) - c(a) - c(b) + c(0)``
(exact when no three pins interact). Pairs that are infeasible (memory, or
both pins on one op) get ``x[p, a] + x[q, b] <= 1``. When the whole choice space
is small (``--exhaustive-limit``, default 512 combinations), every combination
is also evaluated exactly, which is the ground truth; the ILP's choice is
always re-evaluated exactly too. The gap, ``(greedy - optimum) / shardy``
(predicted bytes), is given only where the optimum is proven (enumerated);
where the space is too big and three or more pins interact (the ILP
objective differs from the re-evaluated ILP choice) it says so instead.
Prints a markdown table, writes JSON.

    python -m bench.cost_aware_ilp [--only NAME ...] [--json PATH]
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import os
import pathlib
import sys
import time

os.environ["XLA_FLAGS"] = (
    os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8"
).strip()
ROOT = pathlib.Path(__file__).resolve().parents[1]

import numpy as np  # noqa: E402

from bench import cost_aware as bench_cost_aware  # noqa: E402
from bench.models import REGISTRY, REGRESSIONS, make_programs  # noqa: E402

# Small programs whose conflict points the check covers (fsdp_train_step: 29
# greedy evaluations; its pairwise model is still small enough).
DEFAULT = ("mlp_data_parallel", "mlp_megatron", "fsdp_train_step", "transformer", "conv_net",
           "embedding_scatter", "moe_routing", "scan_rnn", "shard_map_pipeline",
           "abstract_mesh_constraint", "conflict_mlp", "conflict_attention",
           "conflict_attention_seq", "conflict_mlp_narrow", "conflict_mlp_wide",
           "conflict_fsdp_pair")


@dataclasses.dataclass
class Row:
    name: str
    points: int = 0
    alternatives: int = 0
    space: int = 0  # number of combinations
    baseline: int = 0  # predicted bytes, Shardy-compatible
    greedy: int = 0  # predicted bytes of the greedy search's pins
    ilp_objective: int | None = None  # the linearised objective at the ILP optimum
    ilp: int | None = None  # the ILP choice, re-evaluated exactly
    exhaustive: int | None = None  # the exact optimum (when enumerated)
    method: str = ""
    evaluations: int = 0
    seconds: float = 0.0
    greedy_pins: list[str] = dataclasses.field(default_factory=list)
    ilp_pins: list[str] = dataclasses.field(default_factory=list)
    error: str | None = None

    @property
    def exact(self) -> bool:
        """Whether the optimum is proven: enumerated, or the pairwise model was exact."""
        return self.exhaustive is not None

    @property
    def optimum(self) -> int | None:
        """The proven optimum (None where the pairwise model is not exact and not enumerated)."""
        return self.exhaustive

    @property
    def gap(self) -> float | None:
        """(greedy - optimum) / baseline: how far greedy is, as a share of Shardy's bytes."""
        if self.optimum is None or not self.baseline:
            return None
        return (self.greedy - self.optimum) / self.baseline


def capture(program):
    """Lower ``program`` with the cost-aware strategy; return (imported module, resolution)."""
    import shardc.compiler.cost_aware as cost_aware

    seen = {}
    original = cost_aware.resolve

    def spy(imported, **kwargs):
        seen["module"] = imported.clone()
        seen["kwargs"] = kwargs
        return original(imported, **kwargs)

    cost_aware.resolve = spy
    try:
        lowered, _, _ = bench_cost_aware._lower(program, "cost-aware")
    finally:
        cost_aware.resolve = original
    return seen["module"], seen["kwargs"], lowered.cost_aware_resolution


def choice_sets(reader, resolution, per_point: int = 6):
    """Points (by tag) -> alternatives: baseline points plus the greedy search's pins."""
    from shardc.compiler.cost_aware.candidates import conflict_points

    points: dict[int, list] = {}
    for point in conflict_points(reader, per_point=per_point):
        if point.tag is not None and point.alternatives:
            points.setdefault(point.tag, []).extend(point.alternatives)
    for pin in resolution.pins:  # make the greedy choice reachable
        if not any(pin.key() == p.key() for alts in points.values() for p in alts):
            points.setdefault(-1 - pin.op, []).append(pin)
    out = []
    for tag in sorted(points):
        unique = {p.key(): p for p in points[tag]}
        out.append(list(unique.values()))
    return out


def analyse(program, exhaustive_limit: int = 512) -> Row:
    from scipy.optimize import Bounds, LinearConstraint, milp

    from shardc.compiler.cost_aware.pricing import ModuleEvaluator

    row = Row(program.name)
    start = time.perf_counter()
    imported, kwargs, resolution = capture(program)
    evaluate = ModuleEvaluator(imported, kwargs.get("conservative", False))
    base_bytes, base_memory, reader = evaluate([])
    row.baseline = base_bytes
    row.greedy = resolution.final_bytes
    row.greedy_pins = [f"op {p.op}: {p.why}" for p in resolution.pins]
    points = choice_sets(reader, resolution)
    row.points = len(points)
    row.alternatives = sum(len(a) for a in points)
    row.space = int(np.prod([len(a) + 1 for a in points])) if points else 1
    cache: dict[tuple, tuple[int, bool]] = {(): (base_bytes, True)}
    if not points:  # nothing to choose: Shardy's choice is the optimum
        row.ilp_objective = row.ilp = row.exhaustive = base_bytes
        row.method = "no conflict points"
        row.evaluations = evaluate.count
        row.seconds = time.perf_counter() - start
        return row

    def cost(pins) -> tuple[int, bool]:
        key = tuple(sorted(p.key() for p in pins))
        if key not in cache:
            if len({p.op for p in pins}) < len(pins):
                cache[key] = (0, False)  # two pins on one op: not a choice
            else:
                total, memory, _ = evaluate(list(pins))
                cache[key] = (total, memory <= base_memory)
        return cache[key]

    # Variables: x[p, a] for a in 0..len(alts) (0: Shardy's choice), then y per pair.
    index = {}
    for p, alts in enumerate(points):
        for a in range(len(alts) + 1):
            index[p, a] = len(index)
    objective = [0.0] * len(index)
    rows, lower, upper = [], [], []

    def constraint(coefficients: dict[int, float], lo: float, hi: float) -> None:
        rows.append(coefficients)
        lower.append(lo)
        upper.append(hi)

    for p, alts in enumerate(points):
        constraint({index[p, a]: 1.0 for a in range(len(alts) + 1)}, 1, 1)
        for a, pin in enumerate(alts, 1):
            single, ok = cost([pin])
            objective[index[p, a]] = single - base_bytes
            if not ok:
                constraint({index[p, a]: 1.0}, 0, 0)
    pairs = 0
    for (p, alts_p), (q, alts_q) in itertools.combinations(enumerate(points), 2):
        for a, pin_a in enumerate(alts_p, 1):
            for b, pin_b in enumerate(alts_q, 1):
                both, ok = cost([pin_a, pin_b])
                xa, xb = index[p, a], index[q, b]
                if not ok:
                    constraint({xa: 1.0, xb: 1.0}, -np.inf, 1)
                    continue
                weight = both - cost([pin_a])[0] - cost([pin_b])[0] + base_bytes
                if weight == 0:
                    continue
                y = len(objective)
                objective.append(float(weight))
                pairs += 1
                # y = x_a AND x_b: y >= x_a + x_b - 1 and y <= x_a, y <= x_b.
                constraint({y: 1.0, xa: -1.0, xb: -1.0}, -1, np.inf)
                constraint({y: 1.0, xa: -1.0}, -np.inf, 0)
                constraint({y: 1.0, xb: -1.0}, -np.inf, 0)
    matrix = np.zeros((len(rows), len(objective)))
    for r, coefficients in enumerate(rows):
        for c, v in coefficients.items():
            matrix[r, c] = v
    result = milp(np.array(objective), integrality=np.ones(len(objective)),
                  bounds=Bounds(0, 1),
                  constraints=[LinearConstraint(matrix, np.array(lower), np.array(upper))]
                  if rows else None)
    if result.status != 0:
        raise RuntimeError(f"milp: {result.message}")
    chosen = [alts[a - 1] for p, alts in enumerate(points) for a in range(1, len(alts) + 1)
              if result.x[index[p, a]] > 0.5]
    row.ilp_objective = int(round(base_bytes + result.fun))
    row.ilp, ok = cost(chosen)
    if not ok:
        row.ilp = None
    row.ilp_pins = [f"op {p.op}: {p.why}" for p in chosen]
    row.method = f"ILP, pairwise-linearised ({pairs} interaction terms)"
    if row.space <= exhaustive_limit:
        best = base_bytes
        for combo in itertools.product(*[[None, *alts] for alts in points]):
            pins = [p for p in combo if p is not None]
            total, ok = cost(pins)
            if ok and total < best:
                best = total
        row.exhaustive = best
        row.method += " + exhaustive"
    row.evaluations = evaluate.count
    row.seconds = time.perf_counter() - start
    return row


def markdown(rows: list[Row]) -> str:
    lines = ["| program | points | alternatives | combinations | shardy (pred.) | greedy | "
             "ILP objective | ILP (exact) | exhaustive | gap | method |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for r in rows:
        if r.error:
            lines.append(f"| {r.name} | error: {r.error} ||||||||||")
            continue
        gap = "n/a" if r.gap is None else f"{100 * r.gap:.1f}%"
        if r.gap is None and r.ilp is not None:
            gap = f"n/a (ILP choice {'<=' if r.ilp <= r.greedy else '>'} greedy)"
        ex = "-" if r.exhaustive is None else str(r.exhaustive)
        lines.append(f"| {r.name} | {r.points} | {r.alternatives} | {r.space} | {r.baseline} | "
                     f"{r.greedy} | {r.ilp_objective} | {r.ilp} | {ex} | {gap} | {r.method} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    every = {**REGISTRY, **REGRESSIONS}
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", action="append", choices=sorted(every))
    parser.add_argument("--json", default=str(ROOT / "bench" / "cost_aware_ilp.json"))
    parser.add_argument("--exhaustive-limit", type=int, default=512)
    options = parser.parse_args(argv)
    rows = []
    for program in make_programs("small", options.only or DEFAULT, every):
        print(f"solving {program.name} ...", file=sys.stderr, flush=True)
        try:
            rows.append(analyse(program, options.exhaustive_limit))
        except Exception as error:  # noqa: BLE001 - one failure must not end the run
            rows.append(Row(program.name, error=f"{type(error).__name__}: {error}"))
    print(markdown(rows))
    with open(options.json, "w") as handle:
        json.dump({"rows": [dict(dataclasses.asdict(r), exact=r.exact, optimum=r.optimum,
                                 gap=r.gap)
                            for r in rows]}, handle, indent=2)
        handle.write("\n")
    return 1 if any(r.error for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
