"""The zoo (``bench/zoo/``): real JAX programs through jax.jit and both of shardc's routes.

For every program: ``jax.jit``, shardc's default (``propagation="shardy"``) and
shardc with ``propagation="cost-aware"`` compile the same function for the same
placed inputs and shardings in this process; the table shows whether jax.jit is
bitwise deterministic run to run, each shardc route's max relative error
against jax.jit (and whether it is bitwise equal), whether the output
shardings match, the collective bytes per device per kind, the memory per
device (XLA's memory analysis), and the lower / compile / per-call times of
all three. Printed as a markdown table and written as JSON. How each figure is
taken: ``bench/e2e_measure.py`` and ``bench/zoo/report.py``. Runs on 8 CPU
devices; a failing program is a row with its error (and its traceback's tail
in the JSON), and the exit status is 1.

    python -m bench.zoo [--large] [--only NAME ...] [--json PATH] [--repeats N]
        [--rounds N] [--no-call-timing] [--readme README.md]

``--readme`` also writes the table (with the run's environment) between the
``<!-- zoo:start -->`` and ``<!-- zoo:end -->`` markers of that file.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import sys

# `python -m bench.zoo` has imported the zoo's programs (and jax) before this module
# runs; that is still in time, since jax reads XLA_FLAGS only when it creates its CPU
# backend, and no zoo module touches a device at import.
os.environ["XLA_FLAGS"] = (
    os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8"
).strip()

ROOT = pathlib.Path(__file__).resolve().parents[2]

from bench import render_readme  # noqa: E402
from bench.e2e import environment, program_arguments  # noqa: E402
from bench.zoo import REGISTRY, make_programs, report  # noqa: E402

ZOO_START, ZOO_END = "<!-- zoo:start -->", "<!-- zoo:end -->"


def parse_arguments(argv: list[str] | None = None) -> argparse.Namespace:
    parser = program_arguments(
        argparse.ArgumentParser(prog="python -m bench.zoo", description=__doc__.splitlines()[0]),
        REGISTRY, ROOT / "bench" / "zoo.json", repeats=1, rounds=3)
    parser.add_argument("--readme", help="also write the table into this README's zoo section")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    options = parse_arguments(argv)
    size = "large" if options.large else "small"
    rows = []
    for name in options.only or REGISTRY:
        print(f"measuring {name} ...", file=sys.stderr, flush=True)
        try:
            (program,) = make_programs(size, [name])
        except Exception as error:  # noqa: BLE001 - building the program failed (jax side)
            rows.append({"name": name, "error": f"{type(error).__name__}: {error}",
                         "traceback": report.traceback_tail(error)})  # fmt: skip
            print(f"  {name} failed to build: {rows[-1]['error']}", file=sys.stderr)
            continue
        row = report.measure(
            program, repeats=options.repeats, time_calls=not options.no_call_timing,
            rounds=options.rounds, warmup=True,
        )  # fmt: skip
        for key in ("error", "cost_aware_error"):
            if row.get(key):
                print(f"  {name}: {key}: {row[key]}", file=sys.stderr)
        rows.append(row)
    print(report.markdown_table(rows))
    print()
    print(report.FOOTNOTE)
    with open(options.json, "w") as handle:
        json.dump({"environment": environment(size), "rows": rows}, handle, indent=2)
        handle.write("\n")
    if options.readme:
        readme = pathlib.Path(options.readme)
        env = environment(size)
        header = (f"`python -m bench.zoo` ({size} sizes; {env['devices']} {env['platform']} "
                  f"devices on {env['cpu_count']} cores; jax {env['jax']}; shardc "
                  f"{env['git']}; {env['date']}):")
        body = "\n".join(["", header, "", report.markdown_table(rows), "", report.FOOTNOTE, ""])
        readme.write_text(render_readme.splice(readme.read_text(), body, ZOO_START, ZOO_END))
    failed = [row for row in rows if row.get("error") or row.get("cost_aware_error")]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
