"""First-call time: shardc's ``jit(f)(*args)`` against ``jax.jit(f)(*args)``, side by side.

A program's first call traces, lowers, compiles and runs it: what a user
waits for before the first step. Every zoo program (and, with ``--models``,
every ``bench/models`` program) is jitted as its users jit it
(``e2e_measure.jax_jitted`` / ``shardc_jitted``: its shardings, donated
arguments, ``program.jit``) through a fresh function object, so that no
trace, lowering or compilation cache answers for either route, and called
once on its arguments (fresh copies of the donated ones, placed before the
clock starts), blocked on its results. The routes alternate; the first round
warms up; the table shows the median of the other rounds, their ratio and
the geometric mean of the ratios. Each call starts after a full garbage
collection. ``--clock cpu`` (the default) times the process's CPU time: XLA
compiles and runs on threads of its own, and on a machine shared with other
work it is what the two routes cost rather than how long they waited.

    python -m bench.first_call [--models] [--rounds N] [--clock cpu|wall] [--only NAME ...]
                               [--json PATH]
    python -m bench.first_call --table RUN.json [RUN.json ...] [--readme README.md]

``--table`` renders the rows of one or more runs' JSON (several runs, say, of
parts of the programs) as the README's table, zoo and ``bench/models`` geomeans
apart, and with ``--readme`` writes it between the README's first-call markers.
"""

from __future__ import annotations

import os

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")

import argparse  # noqa: E402
import gc  # noqa: E402
import json  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402

import jax  # noqa: E402

from bench import e2e_measure, models, zoo  # noqa: E402
from bench.models.program import Program  # noqa: E402
from bench.render_readme import splice  # noqa: E402
from bench.stats import geomean  # noqa: E402

CLOCKS = {"cpu": time.process_time, "wall": time.perf_counter}
ROUTES = {"jax": e2e_measure.jax_jitted, "shardc": e2e_measure.shardc_jitted}
START, END = "<!-- first-call:start -->", "<!-- first-call:end -->"


def first_call_seconds(program: Program, route: str, clock) -> float:
    """Seconds (of ``clock``) of one first call of ``program`` through a fresh function of
    ``route``: trace, lower, compile, run, results ready."""
    jitted = ROUTES[route](program)
    args = e2e_measure.call_args(program)
    with e2e_measure.mesh_context(program):
        # Garbage earlier calls left is collected before, not charged to this one.
        gc.collect()
        start = clock()
        jax.block_until_ready(jitted(*args))
        return clock() - start


def measure(program: Program, rounds: int, clock) -> dict[str, float]:
    """Median first-call seconds per route over ``rounds`` rounds after a warm-up round,
    the routes alternating."""
    times: dict[str, list[float]] = {route: [] for route in ROUTES}
    for index in range(rounds + 1):
        for route in ROUTES if index % 2 == 0 else list(ROUTES)[::-1]:
            times[route].append(first_call_seconds(program, route, clock))
    return {route: statistics.median(seconds[1:]) for route, seconds in times.items()}


def table(runs: list[dict]) -> list[str]:
    """The README's table of the rows of ``runs`` (``--json`` files), in program order
    (zoo, then ``bench/models``), with each group's geometric mean of the ratios."""
    rows = [row for run in runs for row in run["rows"]]
    rows.sort(key=lambda row: not row["zoo"])  # stable: each run's own order within
    loads = ", ".join(f"{run['load_average']:.1f}" for run in runs)
    clocks = " / ".join(sorted({run["clock"] for run in runs}))
    lines = [f"First call of a fresh function (trace, lower, compile, run; median {clocks} "
             f"time of the process; load average {loads}):", "",
             "| program | jax.jit ms | shardc ms | shardc / jax.jit |", "|---|---:|---:|---:|"]
    for row in rows:
        lines.append(f"| {row['name']} | {row['jax'] * 1e3:.1f} | {row['shardc'] * 1e3:.1f} "
                     f"| {row['ratio']:.2f}× |")
    for title, zoo_rows in (("zoo", True), ("bench/models", False)):
        group = [row["ratio"] for row in rows if row["zoo"] == zoo_rows]
        if group:
            lines.append(f"| **geometric mean, {title}** | | | **{geomean(group):.2f}×** |")
    return lines


def write_table(paths: list[str], readme: str | None) -> None:
    """Print the table of the runs at ``paths``; write it into ``readme`` if given."""
    runs = []
    for path in paths:
        with open(path) as handle:
            runs.append(json.load(handle))
    lines = table(runs)
    print("\n".join(lines))
    if readme is not None:
        with open(readme) as handle:
            text = handle.read()
        with open(readme, "w") as handle:
            handle.write(splice(text, "\n" + "\n".join(lines) + "\n", START, END))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.first_call",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--models", action="store_true", help="also the bench/models programs")
    parser.add_argument("--rounds", type=int, default=3, help="timed rounds per program")
    parser.add_argument("--clock", choices=sorted(CLOCKS), default="cpu",
                        help="the process's CPU time (steadier on a busy machine), or wall time")
    parser.add_argument("--only", action="append", help="only these programs")
    parser.add_argument("--json", help="also write the rows here")
    parser.add_argument("--table", nargs="+", metavar="RUN",
                        help="render these runs' JSON as the README's table instead")
    parser.add_argument("--readme", help="with --table: write it into this README")
    options = parser.parse_args(argv)
    if options.table:
        write_table(options.table, options.readme)
        return 0
    programs = zoo.make_programs("small")
    if options.models:
        programs += models.make_programs("small")
    if options.only:
        programs = [p for p in programs if p.name in options.only]
    rows = []
    print(f"{'program':24} {'jax.jit ms':>10} {'shardc ms':>10} {'ratio':>6}", flush=True)
    for program in programs:
        seconds = measure(program, options.rounds, CLOCKS[options.clock])
        ratio = seconds["shardc"] / seconds["jax"]
        rows.append({"name": program.name, "zoo": program.name in zoo.REGISTRY, **seconds,
                     "ratio": ratio})
        print(f"{program.name:24} {seconds['jax'] * 1e3:10.1f} {seconds['shardc'] * 1e3:10.1f} "
              f"{ratio:6.2f}", flush=True)
        if options.json:  # after every program: a long run stopped early keeps its rows
            with open(options.json, "w") as handle:
                json.dump({"clock": options.clock, "rounds": options.rounds,
                           "load_average": os.getloadavg()[0], "rows": rows,
                           "geomean": geomean(row["ratio"] for row in rows)}, handle, indent=1)
                handle.write("\n")
    print(f"{'geomean':24} {'':>10} {'':>10} {geomean(row['ratio'] for row in rows):6.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
