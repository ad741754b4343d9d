"""Lowering time of ``propagation="cost-aware"`` over the default route, and its decisions.

Every zoo program (small size) and the 128-layer transformer of
``bench/propagation.py`` is lowered through ``shardc.compiler.jit`` with
``propagation="shardy"`` and with ``propagation="cost-aware"``, alternating,
each time through a fresh function (no lowering cache answers). The first
round warms up; the table shows the median seconds of the other rounds, their
ratio (cost-aware / shardy) and the geometric mean of the ratios (each lowering
starts after a full garbage collection, not charged to either route). Each row
also carries what the search decided (``decisions_of``: its pins, predicted
bytes and memory, and each decision's choice), so a run can be compared with
decisions recorded before a change to the search (``--compare RECORDED.json``).
``--record PATH`` only lowers each target once with ``propagation="cost-aware"``
(also the ``bench/models`` programs) and writes ``{name: decisions}``: the file
``test/python/compiler/cost_aware/test_search.py`` holds the search to
(``DECISIONS``; regenerate it so when a change of decisions is intended).

    python -m bench.cost_aware_speed [--rounds N] [--only NAME ...] [--layers N] [--cpu]
                                     [--json PATH] [--compare PATH] [--record PATH]
"""

from __future__ import annotations

import os

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")

import argparse  # noqa: E402
import gc  # noqa: E402
import json  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable  # noqa: E402
from typing import Any  # noqa: E402

from bench import e2e_measure, zoo  # noqa: E402
from bench import propagation as transformer_bench  # noqa: E402
from bench.models import REGISTRY, REGRESSIONS, make_programs  # noqa: E402
from bench.models.program import Program  # noqa: E402
from bench.stats import geomean  # noqa: E402
from shardc.compiler import jit  # noqa: E402

STRATEGIES = ("shardy", "cost-aware")
TRANSFORMER = "transformer_{}_layers"


def decisions_of(resolution: Any) -> dict[str, Any] | None:
    """What the search decided, as JSON holds it: equal for equal decisions."""
    if resolution is None:
        return None
    return json.loads(json.dumps({
        "evaluations": [resolution.evaluations, resolution.region_evaluations],
        "pins": [[pin.op, pin.result, [d.axes for d in pin.sharding.dims], pin.why]
                 for pin in resolution.pins],
        "bytes": [resolution.baseline_bytes, resolution.final_bytes],
        "memory": [resolution.baseline_memory, resolution.final_memory],
        "changed": sorted(resolution.changed),
        "decisions": [[d.op, d.name, d.chosen, d.points, d.tried] for d in resolution.decisions],
    }))


def zoo_lowering(program: Program) -> Callable[[str], Any]:
    """Lower ``program`` with a strategy, as the zoo does (``e2e_measure.prepare``)."""
    routes = {"shardy": "shardc", "cost-aware": e2e_measure.COST_AWARE}

    def lower(strategy: str):
        jitted, args, _ = e2e_measure.prepare(program, routes[strategy])
        return jitted.lower(*args)

    return lower


def transformer_lowering(layers: int) -> Callable[[str], Any]:
    """Lower ``bench/propagation.py``'s transformer of ``layers`` blocks with a strategy."""
    fun, args, in_shardings = transformer_bench.transformer_program(layers)

    def lower(strategy: str):
        jitted = jit(e2e_measure.fresh(fun), in_shardings=in_shardings, propagation=strategy)
        return jitted.lower(*args)

    return lower


def targets(layers: int, models: bool = False) -> list[tuple[str, Callable[[str], Any]]]:
    """``(name, lower)`` of every zoo program (and ``bench/models`` program), then the
    transformer of ``layers`` blocks (none for 0)."""
    programs = zoo.make_programs("small")
    if models:
        programs += make_programs("small", None, {**REGISTRY, **REGRESSIONS})
    found = [(p.name, zoo_lowering(p)) for p in programs]
    if layers:
        found.append((TRANSFORMER.format(layers), transformer_lowering(layers)))
    return found


def record(path: str, layers: int) -> None:
    """Write the decisions of one cost-aware lowering of every target, by name."""
    decisions = {}
    for name, lower in targets(layers, models=True):
        print(f"lowering {name} ...", file=sys.stderr, flush=True)
        decisions[name] = decisions_of(lower("cost-aware").cost_aware_resolution)
    write_json(path, decisions)


def measure(name: str, lower: Callable[[str], Any], rounds: int,
            clock: Callable[[], float] = time.perf_counter) -> dict[str, Any]:
    """Median lowering seconds per strategy (after a warm-up round) by ``clock``, and the
    decisions."""
    times: dict[str, list[float]] = {s: [] for s in STRATEGIES}
    decisions = None
    for index in range(rounds + 1):
        order = STRATEGIES if index % 2 == 0 else STRATEGIES[::-1]
        for strategy in order:
            # Garbage earlier lowerings left is collected before, not charged to this one.
            gc.collect()
            start = clock()
            lowered = lower(strategy)
            times[strategy].append(clock() - start)
            if strategy == "cost-aware":
                decisions = decisions_of(lowered.cost_aware_resolution)
    seconds = {s: statistics.median(t[1:]) for s, t in times.items()}
    return {"name": name, **seconds, "ratio": seconds["cost-aware"] / seconds["shardy"],
            "decisions": decisions}


HEADER = f"{'program':26} {'shardy ms':>10} {'cost-aware ms':>13} {'ratio':>6}"


def row_text(row: dict[str, Any]) -> str:
    """One line of the table, under ``HEADER``."""
    return (f"{row['name']:26} {row['shardy'] * 1e3:10.1f} {row['cost-aware'] * 1e3:13.1f} "
            f"{row['ratio']:6.2f}")


def write_json(path: str, data: Any) -> None:
    with open(path, "w") as handle:
        json.dump(data, handle, indent=1)
        handle.write("\n")


def compare(rows: list[dict], recorded_path: str) -> list[str]:
    """Names of the rows whose decisions differ from those ``--record`` wrote to
    ``recorded_path`` (or that it lacks)."""
    with open(recorded_path) as handle:
        recorded = json.load(handle)
    return [row["name"] for row in rows if recorded.get(row["name"]) != row["decisions"]]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.cost_aware_speed",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3, help="timed rounds per program")
    parser.add_argument("--only", action="append", help="only these programs")
    parser.add_argument("--layers", type=int, default=128, help="transformer blocks (0: none)")
    parser.add_argument("--json", help="write the rows (with the decisions) here")
    parser.add_argument("--compare", help="a --record file whose decisions must be equal")
    parser.add_argument("--record", help="only write every target's decisions here")
    parser.add_argument("--cpu", action="store_true",
                        help="time by this process's CPU time (steadier on a busy machine)")
    options = parser.parse_args(argv)
    if options.record:
        record(options.record, options.layers)
        return 0
    chosen = targets(options.layers)
    if options.only:
        chosen = [(name, lower) for name, lower in chosen if name in options.only]
    rows = []
    print(HEADER)
    for name, lower in chosen:
        clock = time.process_time if options.cpu else time.perf_counter
        rows.append(measure(name, lower, options.rounds, clock))
        print(row_text(rows[-1]), flush=True)
    mean = geomean(row["ratio"] for row in rows)
    print(f"{'geomean':26} {'':>10} {'':>13} {mean:6.2f}")
    if options.json:
        write_json(options.json, {"clock": "cpu" if options.cpu else "wall",
                                  "load_average": os.getloadavg()[0], "rows": rows,
                                  "geomean": mean})
    if options.compare:
        differing = compare(rows, options.compare)
        print("decisions: " + (f"DIFFER on {', '.join(differing)}" if differing
                               else "identical"))
        return 1 if differing else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
