"""Cost-aware propagation against Shardy-compatible shardc and ``jax.jit``.

For every program of ``bench/models`` (the e2e ``REGISTRY`` and the cost-aware
``REGRESSIONS``): compiled collective bytes per device
(``shardc.runtime.collectives`` on the partitioned HLO, the same parser for
all three routes), memory per device (``memory_analysis``), the numerics of
the cost-aware route against ``jax.jit``, and the lowering time of
``propagation="cost-aware"`` over ``propagation="shardy"`` (median of
``--repeats``). Also the search's own log: predicted bytes before and after,
re-propagations used and conflicts resolved. Prints a markdown table and
writes JSON. Runs on 8 CPU devices.

    python -m bench.cost_aware [--large] [--only NAME ...] [--json PATH] [--repeats N]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import pathlib
import sys

os.environ["XLA_FLAGS"] = (
    os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8"
).strip()
ROOT = pathlib.Path(__file__).resolve().parents[1]

import jax  # noqa: E402

from bench import e2e_measure  # noqa: E402
from bench.models import REGISTRY, REGRESSIONS, make_programs  # noqa: E402
from bench.models.program import Program  # noqa: E402

# The propagation strategies and the name of each one's route in ``e2e_measure``.
ROUTES = {"shardy": "shardc", "cost-aware": e2e_measure.COST_AWARE}


@dataclasses.dataclass
class Row:
    name: str
    bytes: dict[str, int] = dataclasses.field(default_factory=dict)  # jax, shardy, cost-aware
    memory: dict[str, int] = dataclasses.field(default_factory=dict)
    max_rel_error: float | None = None  # cost-aware vs jax.jit
    lower_seconds: dict[str, float] = dataclasses.field(default_factory=dict)
    time_ratio: float | None = None  # cost-aware / shardy lowering time
    predicted: dict[str, int] = dataclasses.field(default_factory=dict)
    evaluations: int = 0  # module propagations
    region_evaluations: int = 0  # region propagations (modules past 256 ops)
    resolved: list[str] = dataclasses.field(default_factory=list)
    error: str | None = None


def _lower(program: Program, strategy: str):
    """``(lowered, seconds, devices to compile for)`` of shardc with ``strategy``."""
    return e2e_measure.lower_route(program, ROUTES[strategy])


def measure(program: Program, repeats: int = 3) -> Row:
    """``e2e_measure.compare`` with the cost-aware route, keyed by strategy."""
    compared = e2e_measure.compare(program, repeats=repeats, time_calls=False, cost_aware=True)
    row = Row(program.name, error=compared.error)
    if compared.error:
        return row
    strategy = {route: name for name, route in ROUTES.items()} | {"jax": "jax"}
    row.bytes = {strategy[route]: b for route, b in compared.collective_bytes.items()}
    row.memory = {strategy[route]: b for route, b in compared.memory_bytes.items()}
    row.lower_seconds = {name: compared.lower_seconds[route] for name, route in ROUTES.items()}
    row.max_rel_error = compared.cost_aware_max_rel_error
    row.time_ratio = compared.cost_aware_lower_ratio
    row.predicted = compared.cost_aware_search["predicted_bytes"]
    row.evaluations = compared.cost_aware_search["evaluations"]
    row.region_evaluations = compared.cost_aware_search["region_evaluations"]
    row.resolved = compared.cost_aware_search["resolved"]
    return row


def markdown(rows: list[Row]) -> str:
    lines = ["| program | jax.jit bytes | shardy bytes | cost-aware bytes | ca/shardy | "
             "memory jax / shardy / ca | rel. error | lower time ca/shardy | evals (+ regions) |",
             "|---|---:|---:|---:|---:|---|---:|---:|---:|"]
    for r in rows:
        if r.error:
            lines.append(f"| {r.name} | error: {r.error} |||||||")
            continue
        b = r.bytes
        ratio = b["cost-aware"] / b["shardy"] if b["shardy"] else 1.0
        mem = " / ".join(str(r.memory[k]) for k in ("jax", "shardy", "cost-aware"))
        lines.append(f"| {r.name} | {b['jax']} | {b['shardy']} | {b['cost-aware']} | "
                     f"{ratio:.3f} | {mem} | {r.max_rel_error:.1e} | {r.time_ratio:.2f} | "
                     f"{r.evaluations} + {r.region_evaluations} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--large", action="store_true")
    parser.add_argument("--only", action="append", choices=sorted({**REGISTRY, **REGRESSIONS}))
    parser.add_argument("--json", default=str(ROOT / "bench" / "cost_aware.json"))
    parser.add_argument("--repeats", type=int, default=3)
    options = parser.parse_args(argv)
    size = "large" if options.large else "small"
    rows = []
    programs = make_programs(size, options.only, {**REGISTRY, **REGRESSIONS})
    for program in programs:
        print(f"measuring {program.name} ...", file=sys.stderr, flush=True)
        rows.append(measure(program, options.repeats))
    print(markdown(rows))
    with open(options.json, "w") as handle:
        json.dump({"size": size, "devices": jax.device_count(), "jax": jax.__version__,
                   "rows": [dataclasses.asdict(r) for r in rows]}, handle, indent=2)
        handle.write("\n")
    return 1 if any(r.error for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
