"""Lowering time: shardc's ``jit(f).lower`` against ``jax.jit(f).lower``, side by side.

Every zoo program (and, with ``--models``, every ``bench/models`` program) is
lowered by both, alternating, each time through a fresh wrapper of its function
so that jax's lowering cache never answers for either. The first round warms
up (imports, rule caches); the table shows the median of the other rounds and
their ratio, and the geometric mean of the ratios. Each lowering starts after a
full garbage collection, so neither route pays for garbage the other left.

For reference it also times Shardy's own C++ propagation pipeline (jaxlib's
``sdy-propagation-pipeline``, which XLA runs when it compiles what ``jax.jit``
lowered) in process, on one thread, on the module ``jax.jit`` lowered: the column
"jax.jit + Shardy C++" is what lowering and then propagating natively costs, the
same work shardc's lowering does, against ``jax.jit``'s lowering alone.
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
import statistics  # noqa: E402
import time  # noqa: E402

import jax  # noqa: E402
from jaxlib.mlir import ir, passmanager  # noqa: E402

from bench import models, zoo  # noqa: E402
from bench.stats import geomean  # noqa: E402
from shardc.compiler import jit  # noqa: E402
from shardc.dialects import make_context  # noqa: E402

ROUTES = {"jax": jax.jit, "shardc": jit}
CLOCKS = {"wall": time.perf_counter, "cpu": time.thread_time}
NATIVE_PIPELINE = "builtin.module(sdy-propagation-pipeline)"


def fresh(fun):
    """A new function object with ``fun``'s behaviour: a miss in every lowering cache."""
    return lambda *args, **kwargs: fun(*args, **kwargs)


def native_pipeline_seconds(lowered, clock) -> float:
    """Seconds Shardy's C++ pipeline takes on the module ``jax.jit`` lowered.

    The module is read (not timed) into a context of its own that runs passes
    on one thread, as shardc's pipeline runs: MLIR's worker threads would
    escape ``--clock cpu``, and on a machine of few cores they cost more wall
    time than they save.
    """
    context = make_context()
    context.enable_multithreading(False)
    text = lowered.compiler_ir("stablehlo").operation.get_asm(binary=True,
                                                               enable_debug_info=True)
    module = ir.Module.parse(text, context)
    pipeline = passmanager.PassManager.parse(NATIVE_PIPELINE, context)
    gc.collect()
    start = clock()
    pipeline.run(module.operation)
    return clock() - start


def lowering_seconds(program, rounds: int, clock=time.perf_counter) -> dict[str, float]:
    """Median seconds (of ``clock``) per route, and of Shardy's pipeline after
    ``jax.jit``'s lowering, over ``rounds`` rounds after one warm-up round."""
    times: dict[str, list[float]] = {route: [] for route in (*ROUTES, "shardy_pipeline")}
    for _ in range(rounds + 1):
        for route, wrap in ROUTES.items():
            jitted = wrap(fresh(program.fun), in_shardings=program.in_shardings,
                          out_shardings=program.out_shardings)
            # Garbage earlier lowerings left is collected before, not charged to this one.
            gc.collect()
            start = clock()
            lowered = jitted.lower(*program.args)
            times[route].append(clock() - start)
            if route == "jax":
                times["shardy_pipeline"].append(native_pipeline_seconds(lowered, clock))
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
    print(f"{'program':24} {'jax.jit ms':>10} {'shardc ms':>10} {'ratio':>6} "
          f"{'Shardy C++ ms':>13} {'jax.jit+Shardy ratio':>20}")
    for program in programs:
        seconds = lowering_seconds(program, options.rounds, CLOCKS[options.clock])
        ratio = seconds["shardc"] / seconds["jax"]
        reference = (seconds["jax"] + seconds["shardy_pipeline"]) / seconds["jax"]
        rows.append({"name": program.name, **seconds, "ratio": ratio,
                     "reference_ratio": reference})
        print(f"{program.name:24} {seconds['jax'] * 1e3:10.1f} {seconds['shardc'] * 1e3:10.1f} "
              f"{ratio:6.2f} {seconds['shardy_pipeline'] * 1e3:13.1f} {reference:20.2f}",
              flush=True)
    ratios = geomean([row["ratio"] for row in rows])
    references = geomean([row["reference_ratio"] for row in rows])
    print(f"{'geomean':24} {'':>10} {'':>10} {ratios:6.2f} {'':>13} {references:20.2f}")
    if options.json:
        with open(options.json, "w") as f:
            json.dump({"clock": options.clock, "load_average": os.getloadavg()[0], "rows": rows,
                       "geomean": ratios, "reference_geomean": references}, f, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
