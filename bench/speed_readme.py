"""Regenerate the README's speed section from the speed benchmarks' JSON.

Rewrites only the text between ``<!-- speed:start -->`` and ``<!-- speed:end -->``:
lowering time against ``jax.jit`` (``bench.lowering --models``, zoo and
``bench/models`` geomeans apart), the propagation pipeline against Shardy's C++
one in process and as whole processes with their peak memory
(``bench.propagation``), and the cost-aware search's lowering time against the
default route's (``bench.cost_aware_speed``).

    python -m bench.lowering --models --json L.json
    python -m bench.propagation --json P.json
    python -m bench.cost_aware_speed --json C.json
    python -m bench.speed_readme --lowering L.json --propagation P.json --cost-aware C.json

Without ``--propagation`` the propagation tables already in the section are kept,
marked with the run they come from.
"""

from __future__ import annotations

import argparse
import datetime
import json
import pathlib
import platform
import re
import subprocess

from bench.models import REGISTRY
from bench.render_readme import ROOT, splice
from bench.stats import geomean

START, END = "<!-- speed:start -->", "<!-- speed:end -->"
RUN = re.compile(r"Measured side by side in one run each \(([^)]*)\)")
EARLIER = re.compile(r"The propagation tables are those of an earlier run \(([^)]*)\)")
PROPAGATION_TITLE = "Propagation against Shardy's C++ passes"
COST_AWARE_TITLE = '`propagation="cost-aware"` against the default route'


def measured(data: dict) -> str:
    """How a benchmark's JSON says it was timed: its clock and the machine's load."""
    parts = [f"{data['clock']} time"] if "clock" in data else []
    if "load_average" in data:
        parts.append(f"load average {data['load_average']:.1f}")
    return "; ".join(parts)


def lowering_lines(data: dict) -> list[str]:
    """The lowering table: each program's medians and ratio, and for reference
    ``jax.jit``'s lowering followed by Shardy's C++ pipeline; geomeans of zoo and
    models."""
    clock = data.get("clock", "wall")
    load = f", load average {data['load_average']:.1f}" if "load_average" in data else ""
    lines = [f"Lowering, shardc's `jit(f).lower()` against `jax.jit(f).lower()` "
             f"(median {clock} time{load}, `python -m bench.lowering --models`). For reference, "
             "the last two columns time Shardy's C++ `sdy-propagation-pipeline` (jaxlib's; "
             "XLA runs it when it compiles) in process, on one thread as shardc's runs, on the "
             "module `jax.jit` lowered: "
             "lowering and then propagating natively, the work shardc's lowering does:", "",
             "| program | jax.jit ms | shardc ms | shardc / jax.jit "
             "| Shardy C++ ms | (jax.jit + Shardy C++) / jax.jit |",
             "|---|---:|---:|---:|---:|---:|"]
    for row in data["rows"]:
        lines.append(f"| {row['name']} | {row['jax'] * 1e3:.1f} | {row['shardc'] * 1e3:.1f} "
                     f"| {row['ratio']:.2f}× | {row['shardy_pipeline'] * 1e3:.1f} "
                     f"| {row['reference_ratio']:.2f}× |")
    for title, rows in (("zoo", [r for r in data["rows"] if r["name"] not in REGISTRY]),
                        ("bench/models", [r for r in data["rows"] if r["name"] in REGISTRY])):
        if rows:
            lines.append(f"| **geometric mean, {title}** | | | "
                         f"**{geomean(r['ratio'] for r in rows):.2f}×** | | "
                         f"**{geomean(r['reference_ratio'] for r in rows):.2f}×** |")
    return lines + [""]


def propagation_lines(data: dict) -> list[str]:
    """The in-process and whole-process propagation tables."""
    lines = ["Propagation against Shardy's C++ passes (jaxlib's) on the unrolled transformer of "
             "`bench/propagation.py`, in process (`sdy-user-priority-propagate`, parse not "
             "timed; median ms):", "",
             "| layers | ops | shardc ms | Shardy ms | shardc / Shardy | output identical |",
             "|---:|---:|---:|---:|---:|:---:|"]
    for r in data["rows"]:
        lines.append(f"| {r['layers']} | {r['ops']} | {r['ours_ms']:.1f} | {r['native_ms']:.1f} "
                     f"| {r['ratio']:.2f}× | {'yes' if r['identical_output'] else 'NO'} |")
    lines += ["", "As whole processes: `shardc-opt FILE -sdy-propagation-pipeline -o OUT` against "
              "a Python process that parses FILE with jaxlib's MLIR, runs Shardy's native "
              "pipeline and prints it (start-up, parse, pipeline and print included; CPU µs per "
              "op beyond the 0-layer start-up row; peak resident memory of each process):", "",
              "| layers | ops | wall, shardc / Shardy | CPU, shardc / Shardy | CPU µs/op, shardc "
              "/ Shardy | peak MiB, shardc / Shardy | output identical |",
              "|---:|---:|---:|---:|---:|---:|:---:|"]
    for r in data["whole_process"]:
        per_op = (f"{r['ours_cpu_us_per_op']:.0f} / {r['native_cpu_us_per_op']:.0f}"
                  if "ours_cpu_us_per_op" in r else "")
        lines.append(
            f"| {r['layers']} | {r['ops']} | {r['ours_wall_ms']:.0f} / {r['native_wall_ms']:.0f}"
            f" ms = {r['wall_ratio']:.2f}× | {r['cpu_ratio']:.2f}× | {per_op} | "
            f"{r['ours_peak_mib']:.0f} / {r['native_peak_mib']:.0f} = {r['peak_ratio']:.2f}× | "
            f"{'yes' if r['identical_output'] else 'NO'} |")
    return lines + [""]


def cost_aware_lines(data: dict) -> list[str]:
    """The cost-aware search's lowering time over the default route's."""
    how = measured(data)
    lines = [f'{COST_AWARE_TITLE} (both shardc; median ms{", " + how if how else ""}, '
             "`python -m bench.cost_aware_speed`; its decisions equal the recorded ones):", "",
             "| program | default ms | cost-aware ms | cost-aware / default |",
             "|---|---:|---:|---:|"]
    for row in data["rows"]:
        lines.append(f"| {row['name']} | {row['shardy'] * 1e3:.1f} | "
                     f"{row['cost-aware'] * 1e3:.1f} | {row['ratio']:.2f}× |")
    lines.append(f"| **geometric mean** | | | **{data['geomean']:.2f}×** |")
    return lines + [""]


def kept_propagation_lines(readme: str) -> list[str]:
    """The propagation tables of the README's speed section as they are, marked with the
    run that measured them (for a section rewritten without ``bench.propagation``)."""
    section = readme.split(START)[1].split(END)[0]
    if PROPAGATION_TITLE not in section or COST_AWARE_TITLE not in section:
        raise SystemExit("the README's speed section holds no propagation tables to keep")
    kept = section[section.index(PROPAGATION_TITLE):section.index(COST_AWARE_TITLE)]
    # Kept once already: the run named then, not the one that kept them.
    run = EARLIER.search(section) or RUN.search(section)
    origin = f" ({run.group(1)})" if run else ""
    return [f"The propagation tables are those of an earlier run{origin}:", "",
            *kept.strip("\n").split("\n"), ""]


def environment() -> str:
    git = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT,
                         capture_output=True, text=True).stdout.strip() or "unknown"
    when = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    return f"shardc {git}; {platform.machine()}; {when}"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.speed_readme",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--lowering", required=True, help="bench.lowering --models --json")
    parser.add_argument("--propagation",
                        help="bench.propagation --json (without: keep the README's tables)")
    parser.add_argument("--cost-aware", required=True, help="bench.cost_aware_speed --json")
    parser.add_argument("--readme", default=str(ROOT / "README.md"))
    options = parser.parse_args(argv)

    def read(path: str) -> dict:
        return json.loads(pathlib.Path(path).read_text())

    readme = pathlib.Path(options.readme)
    text = readme.read_text()
    propagation = (propagation_lines(read(options.propagation)) if options.propagation
                   else kept_propagation_lines(text))
    body = "\n".join(["", f"Measured side by side in one run each ({environment()}):", "",
                      *lowering_lines(read(options.lowering)), *propagation,
                      *cost_aware_lines(read(options.cost_aware))])
    readme.write_text(splice(text, body, START, END))
    print(f"wrote the speed section of {readme}")


if __name__ == "__main__":
    main()
