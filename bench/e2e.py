"""End-to-end comparison of shardc with ``jax.jit`` on the model suite (``bench/models``).

For every program both routes compile the same function for the same placed
inputs and shardings in this process; printed as a markdown table (ratios
shardc / jax.jit) and written as JSON (what ``bench/render_readme.py`` turns
into the README's "How shardc compares"). How each figure is taken:
``bench/e2e_measure.py``. Runs on 8 CPU devices.

    python bench/e2e.py [--large] [--only NAME ...] [--json PATH] [--repeats N]
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import os
import pathlib
import platform
import subprocess
import sys

os.environ["XLA_FLAGS"] = (
    os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8"
).strip()

ROOT = pathlib.Path(__file__).resolve().parents[1]
# `bench` has no __init__.py: it is a namespace package importable from the repo root.
sys.path.insert(0, str(ROOT))

import jax  # noqa: E402

from bench import e2e_measure, e2e_table  # noqa: E402
from bench.models import REGISTRY, make_programs  # noqa: E402


def parse_arguments(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--large", action="store_true", help="the large sizes (default: small)")
    parser.add_argument(
        "--only", action="append", metavar="NAME", choices=sorted(REGISTRY),
        help="run only this program (repeatable)",
    )  # fmt: skip
    parser.add_argument("--json", default=str(ROOT / "bench" / "e2e.json"), help="output path")
    parser.add_argument("--repeats", type=int, default=3, help="lower + compile repeats")
    parser.add_argument("--rounds", type=int, default=5, help="per-call timing rounds")
    parser.add_argument(
        "--no-call-timing", action="store_true", help="skip the per-call time (faster)"
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
        )
        if row.error:
            print(f"  {program.name} failed: {row.error}", file=sys.stderr)
        rows.append(dataclasses.asdict(row))

    print(e2e_table.markdown_table(rows))
    print()
    print(e2e_table.FOOTNOTE)
    with open(options.json, "w") as handle:
        json.dump({"environment": environment(size), "rows": rows}, handle, indent=2)
        handle.write("\n")
    return 1 if any(row["error"] for row in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
