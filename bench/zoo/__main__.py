"""The zoos (``bench/zoo/``, ``bench/libzoo/``): real JAX programs through jax.jit and both of
shardc's routes.

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

    python -m bench.zoo [--zoo {zoo,libzoo}] [--large] [--only NAME ...] [--json PATH]
        [--repeats N] [--rounds N] [--no-call-timing] [--isolate | --in-process]
        [--readme README.md]

``--zoo libzoo`` measures the programs of other libraries (equinox, diffrax,
penzai, orbax-checkpoint, chex, jaxtyping, optax's transforms; the ``libzoo``
extra) instead of the flax zoo. ``--isolate`` measures each program in a child
process of its own (``report.measure_isolated``), so a program that aborts the
process is a row with its signal; the programs a zoo lists in ``ISOLATED`` are
always measured so, unless ``--in-process`` (what the child itself is given).
``--readme`` also writes the table (with the run's environment) between the
``<!-- zoo:start -->`` and ``<!-- zoo:end -->`` markers of that file
(``<!-- libzoo:start -->`` ... for the libzoo).
"""

from __future__ import annotations

import argparse
import importlib
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
from bench.zoo import report  # noqa: E402

# The zoos: the package holding each one's ``REGISTRY`` and ``make_programs``.
ZOOS = ("zoo", "libzoo")


def zoo_module(zoo: str):
    """``bench.zoo`` or ``bench.libzoo``, imported when chosen: the libzoo's libraries
    are an optional extra of their own."""
    return importlib.import_module(f"bench.{zoo}")


def parse_arguments(argv: list[str] | None = None) -> argparse.Namespace:
    chooser = argparse.ArgumentParser(add_help=False)
    chooser.add_argument("--zoo", choices=ZOOS, default="zoo")
    zoo = chooser.parse_known_args(argv)[0].zoo
    parser = program_arguments(
        argparse.ArgumentParser(prog="python -m bench.zoo", description=__doc__.splitlines()[0]),
        zoo_module(zoo).REGISTRY, ROOT / "bench" / f"{zoo}.json", repeats=1, rounds=3)
    parser.add_argument("--zoo", choices=ZOOS, default="zoo",
                        help="which zoo: the flax zoo (default) or other libraries' programs")
    parser.add_argument("--isolate", action="store_true",
                        help="measure each program in a child process of its own")
    parser.add_argument("--in-process", action="store_true",
                        help="measure every program here, even those the zoo isolates "
                        "(what the child of --isolate runs)")
    parser.add_argument("--readme", help="also write the table into this README's zoo section")
    return parser.parse_args(argv)


def measure_in_process(zoo, name: str, size: str, options: argparse.Namespace) -> dict:
    """One row, measured here (a program that fails to build is a row with its error)."""
    try:
        (program,) = zoo.make_programs(size, [name])
    except Exception as error:  # noqa: BLE001 - building the program failed (jax side)
        print(f"  {name} failed to build: {type(error).__name__}: {error}", file=sys.stderr)
        return {"name": name, "error": f"{type(error).__name__}: {error}",
                "traceback": report.traceback_tail(error)}  # fmt: skip
    return report.measure(
        program, repeats=options.repeats, time_calls=not options.no_call_timing,
        rounds=options.rounds, warmup=True,
    )  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    options = parse_arguments(argv)
    size = "large" if options.large else "small"
    zoo = zoo_module(options.zoo)
    child_options = [*(["--large"] if options.large else []), "--repeats", str(options.repeats),
                     "--rounds", str(options.rounds),
                     *(["--no-call-timing"] if options.no_call_timing else [])]  # fmt: skip
    rows = []
    for name in options.only or zoo.REGISTRY:
        print(f"measuring {name} ...", file=sys.stderr, flush=True)
        isolated = name in getattr(zoo, "ISOLATED", ()) and not options.in_process
        if options.isolate and not options.in_process or isolated:
            row = report.measure_isolated(options.zoo, name, child_options)
        else:
            row = measure_in_process(zoo, name, size, options)
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
        command = "python -m bench.zoo" + (" --zoo libzoo" if options.zoo == "libzoo" else "")
        header = (f"`{command}` ({size} sizes; {env['devices']} {env['platform']} "
                  f"devices on {env['cpu_count']} cores; jax {env['jax']}; shardc "
                  f"{env['git']}; {env['date']}):")
        body = "\n".join(["", header, "", report.markdown_table(rows), "", report.FOOTNOTE, ""])
        start, end = f"<!-- {options.zoo}:start -->", f"<!-- {options.zoo}:end -->"
        readme.write_text(render_readme.splice(readme.read_text(), body, start, end))
    failed = [row for row in rows if row.get("error") or row.get("cost_aware_error")]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
