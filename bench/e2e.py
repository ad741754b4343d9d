"""End-to-end comparison of shardc with ``jax.jit`` on the model suite (``bench/models``).

For every program both routes compile the same function for the same placed
inputs and shardings in this process, and so does a third, shardc with
``propagation="cost-aware"`` (unless ``--no-cost-aware``); printed as a
markdown table (ratios shardc / jax.jit; cost-aware bytes and memory over
jax.jit's, its lowering time over shardc's default) and written as JSON (what
``python -m bench.render_readme`` turns into the README's "How shardc compares"). How
each figure is taken: ``bench/e2e_measure.py``.

A second table: the time ``propagation="cost-aware"`` adds to lowering the
unrolled transformer of ``bench/propagation.py`` (``--transformer-layers``,
default 32 and 128 layers), against ``propagation="shardy"``: medians of
interleaved lowerings (``--repeats``, one fewer from 128 layers on), with the
search's evaluations and predicted bytes. Runs on 8 CPU devices.

    python -m bench.e2e [--large] [--only NAME ...] [--json PATH] [--repeats N]
        [--no-cost-aware] [--transformer-layers N ... | --no-transformer]
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import os
import pathlib
import platform
import statistics
import subprocess
import sys
import time

os.environ["XLA_FLAGS"] = (
    os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8"
).strip()

ROOT = pathlib.Path(__file__).resolve().parents[1]

import jax  # noqa: E402

from bench import e2e_measure, e2e_table, propagation  # noqa: E402
from bench.models import REGISTRY, make_programs  # noqa: E402
from shardc.compiler import jit as shardc_jit  # noqa: E402

STRATEGIES = ("shardy", "cost-aware")


def program_arguments(parser: argparse.ArgumentParser, programs, json_path: pathlib.Path,
                      repeats: int, rounds: int) -> argparse.ArgumentParser:
    """The options every program benchmark takes (sizes, which programs, output, timing)."""
    parser.add_argument("--large", action="store_true", help="the large sizes (default: small)")
    parser.add_argument(
        "--only", action="append", metavar="NAME", choices=sorted(programs),
        help="run only this program (repeatable)",
    )  # fmt: skip
    parser.add_argument("--json", default=str(json_path), help="output path")
    parser.add_argument("--repeats", type=int, default=repeats, help="lower + compile repeats")
    parser.add_argument("--rounds", type=int, default=rounds, help="per-call timing rounds")
    parser.add_argument(
        "--no-call-timing", action="store_true", help="skip the per-call time (faster)"
    )
    return parser


def parse_arguments(argv: list[str] | None = None) -> argparse.Namespace:
    parser = program_arguments(argparse.ArgumentParser(description=__doc__.splitlines()[0]),
                               REGISTRY, ROOT / "bench" / "e2e.json", repeats=3, rounds=5)
    parser.add_argument(
        "--no-cost-aware", action="store_true", help='skip the propagation="cost-aware" route'
    )
    parser.add_argument(
        "--transformer-layers", type=int, nargs="*", default=[32, 128], metavar="N",
        help="transformer sizes of the cost-aware lowering-time table (none: skip it)",
    )  # fmt: skip
    parser.add_argument(
        "--no-transformer", action="store_true", help="skip the transformer lowering-time table"
    )
    return parser.parse_args(argv)


def git_revision() -> str:
    """The checkout's commit, with ``-dirty`` when the tree has changes."""
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True,
            check=True,
        ).stdout.strip()  # fmt: skip
        dirty = subprocess.run(
            ["git", "status", "--porcelain"], cwd=ROOT, capture_output=True, text=True, check=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return commit + ("-dirty" if dirty else "")


def environment(size: str) -> dict:
    """What the numbers depend on, stored next to them."""
    return {
        "size": size,
        "devices": jax.device_count(),
        "platform": jax.default_backend(),
        "cpu_count": os.cpu_count(),
        "jax": jax.__version__,
        "python": platform.python_version(),
        "git": git_revision(),
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
    }


def lower_transformer(layers: int, repeats: int) -> dict:
    """Median seconds to lower the ``layers``-block transformer with each strategy
    (interleaved, fresh functions), its op count and the cost-aware search's log."""
    fun, args, in_shardings = propagation.transformer_program(layers)
    seconds = {strategy: [] for strategy in STRATEGIES}
    resolution = None
    for repeat in range(repeats):
        for strategy in STRATEGIES if repeat % 2 == 0 else STRATEGIES[::-1]:
            jitted = shardc_jit(
                e2e_measure.fresh(fun), in_shardings=in_shardings, propagation=strategy
            )
            start = time.perf_counter()
            lowered = jitted.lower(*args)
            seconds[strategy].append(time.perf_counter() - start)
            if strategy == "shardy":
                ops = propagation.count_ops(lowered.module)
            else:
                resolution = lowered.cost_aware_resolution
    median = {strategy: statistics.median(times) for strategy, times in seconds.items()}
    return {
        "layers": layers,
        "ops": ops,
        "repeats": repeats,
        "lower_seconds": median,
        "ratio": e2e_measure.ratio(median["cost-aware"], median["shardy"]),
        **e2e_measure.cost_aware_search(resolution),
    }


def transformer_rows(layer_counts: list[int], repeats: int) -> list[dict]:
    """``lower_transformer`` per size (fewer repeats from 128 layers on); a failure is
    recorded in the row's ``error``."""
    lower_transformer(1, 1)  # untimed: warms jax's and shardc's caches for both strategies
    rows = []
    for layers in layer_counts:
        print(f"lowering the {layers}-layer transformer ...", file=sys.stderr, flush=True)
        try:
            rows.append(lower_transformer(layers, repeats if layers < 128 else max(1, repeats - 1)))
        except Exception as error:  # noqa: BLE001 - keep the rows measured so far
            rows.append({"layers": layers, "error": f"{type(error).__name__}: {error}"})
            print(f"  failed: {rows[-1]['error']}", file=sys.stderr)
    return rows


def main(argv: list[str] | None = None) -> int:
    options = parse_arguments(argv)
    size = "large" if options.large else "small"
    rows = []
    for program in make_programs(size, options.only):
        print(f"measuring {program.name} ...", file=sys.stderr, flush=True)
        row = e2e_measure.compare(
            program,
            repeats=options.repeats,
            time_calls=not options.no_call_timing,
            rounds=options.rounds,
            cost_aware=not options.no_cost_aware,
        )
        if row.error:
            print(f"  {program.name} failed: {row.error}", file=sys.stderr)
        rows.append(dataclasses.asdict(row))
    print(e2e_table.markdown_table(rows))
    print()
    print(e2e_table.footnote(rows))
    results = {"environment": environment(size), "rows": rows}

    layer_counts = [] if options.no_transformer else options.transformer_layers
    if layer_counts:
        results["transformer"] = transformer_rows(layer_counts, options.repeats)
        print()
        print(e2e_table.TRANSFORMER_TITLE)
        print()
        print(e2e_table.transformer_table(results["transformer"]))
    with open(options.json, "w") as handle:
        json.dump(results, handle, indent=2)
        handle.write("\n")
    failed = [row for row in rows + results.get("transformer", []) if row.get("error")]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
