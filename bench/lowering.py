"""Lowering time: shardc's ``jit(f).lower`` against ``jax.jit(f).lower``, side by side.

Every zoo program (and, with ``--models``, every ``bench/models`` program) is
lowered by both, alternating, each time through a fresh wrapper of its function
so that jax's lowering cache never answers for either. The first round warms
up (imports, rule caches); the table shows the median of the other rounds and
their ratio, and the geometric mean of the ratios. Each lowering starts after a
full garbage collection, so neither route pays for garbage the other left.
``--clock cpu`` times the lowering thread's CPU time instead of wall time: on a
machine shared with other work, what the two routes cost rather than how long
they waited. Run as
``python -m bench.lowering [--models] [--rounds N] [--clock wall|cpu] [--json PATH]``.
"""

from __future__ import annotations

import os

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")

import argparse  # noqa: E402
import gc  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402

import jax  # noqa: E402

from bench import models, zoo  # noqa: E402
from shardc.compiler import jit  # noqa: E402

ROUTES = {"jax": jax.jit, "shardc": jit}
CLOCKS = {"wall": time.perf_counter, "cpu": time.thread_time}


def fresh(fun):
    """A new function object with ``fun``'s behaviour: a miss in every lowering cache."""
    return lambda *args, **kwargs: fun(*args, **kwargs)


def lowering_seconds(program, rounds: int, clock=time.perf_counter) -> dict[str, float]:
    """Median seconds (of ``clock``) per route over ``rounds`` rounds after one warm-up
    round."""
    times: dict[str, list[float]] = {route: [] for route in ROUTES}
    for _ in range(rounds + 1):
        for route, wrap in ROUTES.items():
            jitted = wrap(fresh(program.fun), in_shardings=program.in_shardings,
                          out_shardings=program.out_shardings)
            # Garbage earlier lowerings left is collected before, not charged to this one.
            gc.collect()
            start = clock()
            jitted.lower(*program.args)
            times[route].append(clock() - start)
    return {route: statistics.median(seconds[1:]) for route, seconds in times.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.lowering",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--models", action="store_true", help="also the bench/models programs")
    parser.add_argument("--rounds", type=int, default=3, help="timed rounds per program")
    parser.add_argument("--clock", choices=sorted(CLOCKS), default="wall",
                        help="wall time, or this thread's CPU time (steadier on a busy machine)")
    parser.add_argument("--json", help="also write the rows here")
    options = parser.parse_args(argv)
    programs = zoo.make_programs("small")
    if options.models:
        programs += models.make_programs("small")
    rows = []
    print(f"{'program':24} {'jax.jit ms':>10} {'shardc ms':>10} {'ratio':>6}")
    for program in programs:
        seconds = lowering_seconds(program, options.rounds, CLOCKS[options.clock])
        ratio = seconds["shardc"] / seconds["jax"]
        rows.append({"name": program.name, **seconds, "ratio": ratio})
        print(f"{program.name:24} {seconds['jax'] * 1e3:10.1f} {seconds['shardc'] * 1e3:10.1f} "
              f"{ratio:6.2f}", flush=True)
    geomean = math.exp(statistics.fmean(math.log(row["ratio"]) for row in rows))
    print(f"{'geomean':24} {'':>10} {'':>10} {geomean:6.2f}")
    if options.json:
        with open(options.json, "w") as f:
            json.dump({"clock": options.clock, "rows": rows, "geomean": geomean}, f, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
