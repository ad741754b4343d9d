"""What ``comm_report()`` and ``memory_estimate()`` answer, dumped to compare two versions.

A change meant to make planning faster must not change a prediction. ``dump``
lowers every program of ``bench/models``, the zoo (``bench/zoo``), the comm
report's hand-written reshards (``bench.comm_report.HANDWRITTEN``) and the
Llama-2-7B-shaped steps of ``bench.plan_speed`` (unrolled with 4 layers at 256
devices and 32 at 16,384; scanned and rematerialised with 32 at both), asks
each for both predictions on cpu and tpu (and again, in the other order), and
writes them as JSON; ``compare`` says which programs answer differently in two
dumps (source paths under either repository root read alike, so do those of
installed packages under any environment's ``site-packages``, a worktree's
environment may be another checkout's, and so do lines of ``bench/plan_speed.py``,
whose model the tool lowers).

    python -m bench.plan_outputs dump BEFORE.json     # with the old version
    python -m bench.plan_outputs dump AFTER.json      # with the new one
    python -m bench.plan_outputs compare BEFORE.json AFTER.json

An older checkout without this file dumps by running it from this one, its own
root first on the path: ``PYTHONPATH=OLD python bench/plan_outputs.py dump B.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import re

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")

from bench import comm_report as comm_bench  # noqa: E402
from bench import e2e_measure, plan_speed  # noqa: E402
from bench import memory_estimate as memory_bench  # noqa: E402
from shardc.compiler import jit  # noqa: E402

# The repository whose programs are lowered (where ``bench`` was imported from: a dump
# of another checkout runs this file with that checkout first on the path).
ROOT = pathlib.Path(plan_speed.__file__).resolve().parents[1]
PLATFORMS = ("cpu", "tpu")
# (variant, devices, layers) of the 7B step
STEPS = (("unrolled", 256, 4), ("unrolled", 16384, 32), ("scan", 256, 32),
         ("scan", 16384, 32), ("remat", 256, 32), ("remat", 16384, 32))


def answers(lowered) -> dict:
    """Both predictions of one ``Lowered`` per platform, then asked again the other way
    round."""
    out = {}
    for platform in PLATFORMS:
        report = lowered.comm_report(platform=platform)
        estimate = lowered.memory_estimate(platform=platform)
        out[platform] = {"comm": [entry.as_dict() for entry in report.entries],
                         "notes": list(report.notes), "text": report.format_text(),
                         "memory": json.loads(estimate.to_json())}
    out["again"] = {"memory": json.loads(lowered.memory_estimate().to_json()),
                    "text": lowered.comm_report().format_text()}
    return out


def step_name(variant: str, devices: int, layers: int) -> str:
    return f"7b-{variant}-{devices}-{layers}"


def dump(only: list[str] | None = None) -> dict:
    """The answers of every program (or of those named in ``only``), by name; a program
    that fails is its error."""
    named = [n for n in only or () if n in memory_bench.REGISTRY]
    programs = ((memory_bench.make_programs("small", named or None) if named or not only
                 else []) + [make("small") for name, make in comm_bench.HANDWRITTEN.items()
                             if not only or name in only])
    results: dict = {}
    for program in programs:
        try:
            with e2e_measure.mesh_context(program):
                results[program.name] = answers(
                    e2e_measure.lower_route(program, "shardc")[0])
        except Exception as error:  # noqa: BLE001 - a row, compared like the others
            results[program.name] = f"{type(error).__name__}: {error}"
    for variant, devices, layers in STEPS:
        name = step_name(variant, devices, layers)
        if only and name not in only:
            continue
        mesh = plan_speed.mesh_of(devices)
        args = plan_speed.abstract_args(variant, mesh, layers)
        step = jit(plan_speed.make_step(variant, layers, plan_speed.HEADS, mesh))
        results[name] = answers(step.trace(*args).lower(lowering_platforms=("cpu",)))
    return results


def _normalised(text: str, root: str) -> str:
    text = re.sub(r'[^\s"\'(]*/site-packages/', "SITE/", text)
    text = text.replace(root.rstrip("/") + "/", "ROOT/")
    return re.sub(r'plan_speed\.py(\\?"?):\d+(:\d+)?', r"plan_speed.py\1:L", text)


def compare(before: dict, after: dict) -> list[str]:
    """The programs whose answers differ (or that only one dump holds)."""
    names = sorted(set(before) | set(after))
    return [name for name in names if before.get(name) != after.get(name)]


def load(path: str) -> dict:
    data = json.loads(pathlib.Path(path).read_text())
    return json.loads(_normalised(json.dumps(data["results"]), data["root"]))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.plan_outputs",
                                     description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    dumping = commands.add_parser("dump", help="write every program's answers")
    dumping.add_argument("path")
    dumping.add_argument("only", nargs="*", help="only these programs")
    comparing = commands.add_parser("compare", help="the programs two dumps differ on")
    comparing.add_argument("before")
    comparing.add_argument("after")
    options = parser.parse_args(argv)
    if options.command == "dump":
        results = dump(options.only or None)
        pathlib.Path(options.path).write_text(
            json.dumps({"root": str(ROOT), "results": results}, indent=0, sort_keys=True))
        print(f"wrote the answers of {len(results)} programs to {options.path}")
        return 0
    before, after = load(options.before), load(options.after)
    differ = compare(before, after)
    print(f"{len(before)} and {len(after)} programs; {len(differ)} answer differently"
          + (": " + ", ".join(differ) if differ else ""))
    return 1 if differ else 0


if __name__ == "__main__":
    raise SystemExit(main())
