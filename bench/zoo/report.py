"""Measuring the zoo and printing it: one row per program, and the markdown table.

``measure`` compiles a zoo program three ways in this process, on the same
placed inputs: ``jax.jit``, shardc (``propagation="shardy"``, the default) and
shardc with ``propagation="cost-aware"``, through ``bench/e2e_measure.py``
(donated arguments re-placed before every call on every route; programs that
ask for it run under ``jax.set_mesh``). It also runs jax.jit's program twice to
see whether it is bitwise deterministic run to run, and compares each shardc
route's results with jax.jit's bit for bit. Each route is built and run
apart, so a failing route leaves the others measured. A row is a dict: the
``Comparison``'s fields (``error``: shardc's default route failed, or jax.jit)
plus ``mesh``, ``traceback`` (the failure's tail), ``jax_error``,
``cost_aware_error`` / ``cost_aware_traceback`` (that route alone failed) and
``timing_error``; where shardc's default route fails, jax.jit's own figures
(determinism, collectives, memory) are still filled. For each shardc route the
row also holds what shardc predicted before compiling (``predicted_collectives``:
``Lowered.comm_report()`` bytes per kind; ``predicted_memory``:
``Lowered.memory_estimate()``), next to what XLA compiled; ``prediction_misses``
says where they part by more than the tolerances. ``measure_isolated`` takes
the same row in a child process (``python -m bench.zoo --only NAME``), so a
program that aborts the process (a crash in XLA or MLIR) is a row with its
signal and the last lines it printed. ``markdown_table`` formats the rows.
"""

from __future__ import annotations

import dataclasses
import json
import os
import pathlib
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import traceback as traceback_module
from typing import Any

from bench import e2e_measure
from bench.e2e_table import format_error, format_ratio, human_bytes, human_seconds, one_line
from bench.models.program import Program

COST_AWARE = e2e_measure.COST_AWARE
ROUTES = ("jax", "shardc", COST_AWARE)
SHARDC_ROUTES = ("shardc", COST_AWARE)
KIND_ABBREVIATIONS = {
    "all-gather": "AG", "all-reduce": "AR", "reduce-scatter": "RS", "all-to-all": "A2A",
    "collective-permute": "CP", "collective-broadcast": "CB", "ragged-all-to-all": "RA2A",
}  # fmt: skip
TRACEBACK_LINES = 40
ROOT = pathlib.Path(__file__).resolve().parents[2]
# What says why a child crashed, from its last line that has it on (XLA's and absl's
# check failures come before pages of IR and a stack trace); at most CAUSE_CHARACTERS.
CRASH_CAUSE = re.compile(r"RET_CHECK|Check failed|Fatal Python error|Error:")
CAUSE_CHARACTERS = 400
# How far a prediction may be from what XLA compiled: collective bytes per kind,
# memory per device (arguments + outputs + temporaries - aliased).
COMM_TOLERANCE = e2e_measure.COMM_TOLERANCE
MEMORY_TOLERANCE = 0.10
# (program, route) pairs whose predictions are still off, and why (checked against
# each compiled HLO; test_zoo.py requires every other pair within the tolerances).
# The buffers XLA's schedule keeps live at its peak are named in
# bench/memory_estimate.py's EXPLAINED entry of each program.
_BATCHNORM_SCHEDULE = (
    "memory 0.89x: XLA's scheduler runs the weight gradient's convolution after the input "
    "gradient's, so its peak holds the transposed copy the model frees earlier (the model "
    "keeps program order)")
_PIPELINE_BODIES = (
    "memory 1.12x: the model over-counts the shard_map pipeline's loop bodies' temporaries, "
    "and counts XLA:CPU's 64-byte tables of pointers of tuple-shaped values")
PREDICTION_MISSES: dict[tuple[str, str], str] = {
    ("cnn_batchnorm", "shardc"): _BATCHNORM_SCHEDULE,
    ("pipeline_shard_map", "shardc"): _PIPELINE_BODIES,
    ("pipeline_shard_map", COST_AWARE): _PIPELINE_BODIES,
}


def mesh_text(program: Program) -> str:
    """``data=4×model=2``."""
    return "×".join(f"{name}={size}" for name, size in program.mesh.shape.items())


def traceback_tail(error: BaseException) -> str:
    """The last frames of ``error``'s traceback and the start of its message (XLA's
    messages run to hundreds of lines of IR)."""
    frames = "".join(traceback_module.format_tb(error.__traceback__)).rstrip().splitlines()
    message = f"{type(error).__name__}: {error}".splitlines()
    return "\n".join(frames[-TRACEBACK_LINES:] + message[:TRACEBACK_LINES])


def measure(
    program: Program, *, repeats: int = 1, time_calls: bool = False, rounds: int = 5,
    warmup: bool = False,
) -> dict[str, Any]:  # fmt: skip
    """One zoo row (see the module's docstring); never raises for a program's failure.

    Each route is built (lowered + compiled, ``repeats`` times, alternating the
    order; after one untimed lowering per route with ``warmup``) and run apart
    from the others, so one route's failure leaves the others measured.
    """
    row = e2e_measure.Comparison(program.name, program.description,
                                 donated=bool(program.donate_argnums))  # fmt: skip
    failures: dict[str, tuple[str, str]] = {}  # route -> (error, traceback tail)

    def attempt(route: str, action):
        if route in failures:
            return None
        try:
            return action()
        except Exception as error:  # noqa: BLE001 - recorded in the row
            failures[route] = (f"{type(error).__name__}: {error}", traceback_tail(error))
            return None

    with e2e_measure.mesh_context(program):
        for route in ROUTES if warmup else ():
            attempt(route, lambda: e2e_measure.lower_route(program, route))
        builds: dict[str, e2e_measure.Build] = {}
        times: dict[str, tuple[list, list]] = {route: ([], []) for route in ROUTES}
        for repeat in range(repeats):
            for route in ROUTES if repeat % 2 == 0 else ROUTES[::-1]:
                build = attempt(route, lambda: e2e_measure.build(program, route))
                if build is not None:
                    builds[route] = build
                    times[route][0].append(build.lower_seconds)
                    times[route][1].append(build.compile_seconds)
        lower = {r: statistics.median(t[0]) for r, t in times.items() if r in builds}
        compile_ = {r: statistics.median(t[1]) for r, t in times.items() if r in builds}
        if "jax" in builds and "shardc" in builds:
            attempt("shardc", lambda: e2e_measure.record(
                row, program, {r: builds[r] for r in ("jax", "shardc")}, lower, compile_,
                check_determinism=True,
            ))  # fmt: skip
        if "jax" in builds and COST_AWARE in builds:
            attempt(COST_AWARE, lambda: record_cost_aware(row, program, builds))
        if "jax" in builds and "shardc" in failures:
            attempt("jax", lambda: record_jax_alone(row, program, builds["jax"]))
        predictions: dict[str, dict] = {}
        for route in SHARDC_ROUTES:
            if route in builds and route not in failures:
                found = attempt(f"{route} prediction",
                                lambda: e2e_measure.predict(builds[route].lowered))
                if found is not None:
                    predictions[route] = found
        live = tuple(r for r in ROUTES if r in builds and r not in failures)
        if time_calls and "jax" in live and "shardc" in live:
            attempt("timing", lambda: e2e_measure.record_call_times(
                row, program, live, rounds, 0.05))  # fmt: skip

    def failure(route: str) -> tuple[str | None, str | None]:
        return failures.get(route, (None, None))

    jax_error = failure("jax")[0]
    row.error, traceback = failure("shardc")
    if jax_error and not row.error:
        row.error, traceback = f"jax.jit: {jax_error}", failure("jax")[1]
    cost_aware_error, cost_aware_traceback = failure(COST_AWARE)
    return {
        **dataclasses.asdict(row), "mesh": mesh_text(program), "traceback": traceback,
        "jax_error": jax_error, "cost_aware_error": cost_aware_error,
        "cost_aware_traceback": cost_aware_traceback, "timing_error": failure("timing")[0],
        "predicted_collectives": {r: p["collectives"] for r, p in predictions.items()},
        "predicted_memory": {r: p["memory"] for r, p in predictions.items()},
        "prediction_error": {r: failure(f"{r} prediction")[0] for r in SHARDC_ROUTES
                             if failure(f"{r} prediction")[0]},
    }  # fmt: skip


def measure_isolated(zoo: str, name: str, options: list[str] = (),
                     timeout: float | None = None) -> dict[str, Any]:  # fmt: skip
    """The row of ``zoo``'s program ``name``, measured by ``python -m bench.zoo --zoo ZOO
    --only NAME --in-process`` (with ``options``) in a child process; never raises for
    the program.

    A child that dies (a signal: XLA or MLIR aborting) or writes no row gives a
    row whose ``error`` names the signal or exit status and whose ``traceback``
    holds the last lines the child printed.
    """
    with tempfile.TemporaryDirectory() as folder:
        path = pathlib.Path(folder) / "row.json"
        command = [sys.executable, "-m", "bench.zoo", "--zoo", zoo, "--only", name,
                   "--in-process", "--json", str(path), *options]  # fmt: skip
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(
            filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
        try:
            child = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True,
                                   timeout=timeout)  # fmt: skip
        except subprocess.TimeoutExpired as expired:
            child, error = expired, f"process timed out after {timeout} s"
        else:
            if path.exists():
                (row,) = json.loads(path.read_text())["rows"]
                return row
            error = exit_text(child.returncode)
    output = child.stderr or child.stdout or ""
    if isinstance(output, bytes):  # what a timed-out child printed comes as bytes
        output = output.decode(errors="replace")
    return died(name, error, output)


def exit_text(status: int) -> str:
    """``process aborted by SIGABRT`` (a signal) or ``process exited with status 1``."""
    if status < 0:
        return f"process aborted by {signal.Signals(-status).name}"
    return f"process exited with status {status}"


def died(name: str, error: str, output: str) -> dict[str, Any]:
    """The row of program ``name`` whose process ended with ``error`` (``exit_text``)
    while measuring it, after printing ``output``: the error says why, from the last
    line that does, and the traceback holds the last lines."""
    output = output.rstrip().splitlines()
    causes = (line[found.start():] for line in reversed(output)
              if (found := CRASH_CAUSE.search(line)))  # fmt: skip
    cause = next(causes, next((line for line in reversed(output) if line.strip()), ""))
    error = f"{error}: {cause.strip()[:CAUSE_CHARACTERS]}" if cause else error
    # Which route the child died in is unknown: none counts as measured.
    return {
        "name": name, "error": error, "traceback": "\n".join(output[-TRACEBACK_LINES:]),
        "jax_error": f"not measured: {error}", "cost_aware_error": error,
        "cost_aware_traceback": None, "collective_bytes": {}, "collectives": {},
        "memory_bytes": {}, "jax_deterministic": None, "cost_aware_search": {},
    }  # fmt: skip


def prediction_misses(row: dict[str, Any], route: str) -> list[str]:
    """Where ``route``'s predictions part from what XLA compiled by more than the
    tolerances: ``"all-to-all 0 / 8192"`` per collective kind, ``"memory ..."``."""
    misses = [f"{kind} {predicted} / {compiled}"
              for kind, predicted, compiled in kinds_off(row, route)]
    memory, measured = row["predicted_memory"][route], row["memory_bytes"][route]
    if abs(memory - measured) > MEMORY_TOLERANCE * measured:
        misses.append(f"memory {memory} / {measured}")
    return misses


def kinds_off(row: dict[str, Any], route: str) -> list[tuple[str, int, int]]:
    """``(kind, predicted, compiled)`` bytes of every collective kind whose prediction
    is off by more than ``COMM_TOLERANCE``."""
    compiled = {kind: c["bytes_per_device"] for kind, c in row["collectives"][route].items()}
    return e2e_measure.kinds_off(row["predicted_collectives"][route], compiled)


def record_cost_aware(row: e2e_measure.Comparison, program: Program, builds: dict) -> None:
    """The cost-aware route's bytes, memory, times, numerics and output shardings against
    jax.jit's (and its lowering time against shardc's default, when that one built)."""
    compiled, jax_compiled = builds[COST_AWARE].compiled, builds["jax"].compiled
    summaries = e2e_measure.collectives_of(compiled)
    row.collectives[COST_AWARE] = {
        kind: {"count": s.count, "bytes_per_device": s.bytes_per_device}
        for kind, s in summaries.items() if s.count
    }  # fmt: skip
    row.collective_bytes[COST_AWARE] = sum(s.bytes_per_device for s in summaries.values())
    row.memory_bytes[COST_AWARE] = e2e_measure.memory_bytes_of(compiled)
    row.lower_seconds[COST_AWARE] = builds[COST_AWARE].lower_seconds
    row.compile_seconds[COST_AWARE] = builds[COST_AWARE].compile_seconds
    row.cost_aware_search = e2e_measure.cost_aware_search(builds[COST_AWARE].resolution)
    # Whether what runs is Shardy's choices after all (the compile-time fallback).
    row.cost_aware_search["kept_shardy"] = e2e_measure.stage(compiled).kept_shardy
    expected = e2e_measure.run(jax_compiled, program)
    actual = e2e_measure.run(compiled, program)
    row.cost_aware_max_rel_error = e2e_measure.errors_of(expected, actual)[1]
    row.bitwise_equal[COST_AWARE] = e2e_measure.bitwise_equal(expected, actual)
    row.cost_aware_mismatched_outputs = e2e_measure.mismatched_output_shardings(
        jax_compiled, compiled)
    jax_bytes, jax_memory = e2e_measure.collective_bytes_of(jax_compiled), \
        e2e_measure.memory_bytes_of(jax_compiled)  # fmt: skip
    row.cost_aware_bytes_ratio = e2e_measure.ratio(row.collective_bytes[COST_AWARE], jax_bytes)
    row.cost_aware_memory_ratio = e2e_measure.ratio(row.memory_bytes[COST_AWARE], jax_memory)
    if "shardc" in row.lower_seconds:
        row.cost_aware_lower_ratio = e2e_measure.ratio(
            row.lower_seconds[COST_AWARE], row.lower_seconds["shardc"]
        )


def record_jax_alone(row: e2e_measure.Comparison, program: Program,
                     build: e2e_measure.Build) -> None:  # fmt: skip
    """jax.jit's own figures for a row whose shardc route failed: whether it runs and is
    bitwise deterministic run to run, its collectives, memory and times."""
    first = e2e_measure.run(build.compiled, program)
    row.jax_deterministic = e2e_measure.bitwise_equal(
        first, e2e_measure.run(build.compiled, program)
    )
    summaries = e2e_measure.collectives_of(build.compiled)
    row.collectives["jax"] = {
        kind: {"count": s.count, "bytes_per_device": s.bytes_per_device}
        for kind, s in summaries.items() if s.count
    }  # fmt: skip
    row.collective_bytes["jax"] = sum(s.bytes_per_device for s in summaries.values())
    row.memory_bytes["jax"] = e2e_measure.memory_bytes_of(build.compiled)
    row.lower_seconds["jax"] = build.lower_seconds
    row.compile_seconds["jax"] = build.compile_seconds


# ----------------------------------------------------------------------------
# The table
# ----------------------------------------------------------------------------

HEADER = (
    "| program | mesh | jax.jit bitwise run to run | max rel. error vs jax.jit (shardc / "
    "cost-aware) | output shardings match (shardc / cost-aware) | collective bytes / device, "
    "jax.jit (per kind) | shardc | cost-aware | memory / device, jax.jit | shardc | cost-aware "
    "| lower (jax.jit / shardc / cost-aware) | compile | per call | predicted / compiled "
    "collective bytes (shardc / cost-aware) | predicted / compiled memory |"
)
ALIGN = "|---|---|:---:|---:|:---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
FOOTNOTE = (
    "Every route compiles the same function for the same placed inputs and shardings in one "
    "process; shardc = `shardc.compiler.jit(..., propagation=\"shardy\")` (the default), "
    "cost-aware = `propagation=\"cost-aware\"`. Max relative error = max |shardc - jax.jit| / "
    "max |jax.jit| over each output (the worst output counts); \"0 (bitwise)\" = the same bits. "
    "Collective bytes are per device and static (a collective in a loop body counts once), read "
    "from each partitioned HLO by `shardc.runtime.collectives`; AG all-gather, AR all-reduce, "
    "RS reduce-scatter, A2A all-to-all, CP collective-permute, with counts; the shardc columns "
    "show the ratio to jax.jit's bytes, and \"same\" when every kind's count and bytes are "
    "jax.jit's. Memory per device = argument + output + temp - alias bytes of XLA's memory "
    "analysis (donated buffers alias). Times: medians; per call includes dispatch and excludes "
    "re-placing donated arguments. Predicted / compiled: what shardc's `Lowered.comm_report()` "
    "and `Lowered.memory_estimate()` predict before compiling over what XLA compiled, per "
    "route; collective bytes show the ratio of the totals, then every kind off by more than "
    "5% as predicted / compiled (AG 45.0 KiB / 37.0 KiB)."
)


def kinds_text(collectives: dict[str, dict[str, int]]) -> str:
    """``AG 37.0 KiB ×17, AR 96.1 KiB ×14``."""
    parts = [
        f"{KIND_ABBREVIATIONS.get(kind, kind)} {human_bytes(c['bytes_per_device'])} ×{c['count']}"
        for kind, c in sorted(collectives.items())
    ]
    return ", ".join(parts) or "none"


def route_bytes_text(row: dict[str, Any], route: str) -> str:
    if route not in row["collective_bytes"] or "jax" not in row["collective_bytes"]:
        return "—"
    if row["collectives"][route] == row["collectives"]["jax"]:
        return "same"
    ratio = e2e_measure.ratio(row["collective_bytes"][route], row["collective_bytes"]["jax"])
    return f"{format_ratio(ratio)} ({kinds_text(row['collectives'][route])})"


def error_text(row: dict[str, Any], route: str) -> str:
    value = row["max_rel_error"] if route == "shardc" else row.get("cost_aware_max_rel_error")
    if value is None:
        return "—"
    if row.get("bitwise_equal", {}).get(route):
        return "0 (bitwise)"
    return format_error(value)


def match_text(row: dict[str, Any], route: str) -> str:
    if route not in row["collective_bytes"]:
        return "—"
    mismatched = row["mismatched_outputs" if route == "shardc" else "cost_aware_mismatched_outputs"]
    return "no: " + ", ".join(mismatched) if mismatched else "yes"


def predicted_bytes_text(row: dict[str, Any], route: str) -> str:
    """``1.00×`` (every kind within the tolerance), else the ratio and the kinds off."""
    predicted = row.get("predicted_collectives", {}).get(route)
    if predicted is None or route not in row["collectives"]:
        return "—"
    compiled = row["collective_bytes"][route]
    total = format_ratio(e2e_measure.ratio(sum(predicted.values()), compiled))
    off = [f"{KIND_ABBREVIATIONS.get(kind, kind)} {human_bytes(mine)} / {human_bytes(xla)}"
           for kind, mine, xla in kinds_off(row, route)]
    return f"{total} ({', '.join(off)})" if off else total


def predicted_memory_text(row: dict[str, Any], route: str) -> str:
    predicted = row.get("predicted_memory", {}).get(route)
    if predicted is None or route not in row.get("memory_bytes", {}):
        return "—"
    return format_ratio(e2e_measure.ratio(predicted, row["memory_bytes"][route]))


def times_text(seconds: dict[str, float]) -> str:
    if not seconds:
        return "—"
    return " / ".join(human_seconds(seconds[r]) if r in seconds else "—" for r in ROUTES)


def format_row(row: dict[str, Any]) -> str:
    """One program's markdown row; a failed route shows its error where its figures go."""
    failed, cost_aware_failed = row.get("error"), row.get("cost_aware_error")
    collective_bytes = row.get("collective_bytes", {})
    memory = row.get("memory_bytes", {})
    row = {"collective_bytes": {}, "collectives": {}, "max_rel_error": None, **row}
    calls = {route: us * 1e-6 for route, us in (row.get("call_microseconds") or {}).items()}

    def memory_text(route: str) -> str:
        if route not in memory or "jax" not in memory:
            return "—"
        return format_ratio(e2e_measure.ratio(memory[route], memory["jax"]))

    cells = [
        row["name"],
        row.get("mesh", ""),
        {True: "yes", False: "no", None: "—"}[row.get("jax_deterministic")],
        (f"**failed**: {one_line(failed)}" if failed else error_text(row, "shardc")) + " / "
        + ("**failed**" if cost_aware_failed else error_text(row, COST_AWARE)),
        ("—" if failed else match_text(row, "shardc")) + " / "
        + ("**failed**" if cost_aware_failed else match_text(row, COST_AWARE)),
        f"{human_bytes(collective_bytes['jax'])} ({kinds_text(row['collectives']['jax'])})"
        if "jax" in collective_bytes else "—",
        "—" if failed else route_bytes_text(row, "shardc"),
        f"**failed**: {one_line(cost_aware_failed)}" if cost_aware_failed and not failed
        else route_bytes_text(row, COST_AWARE),
        human_bytes(memory["jax"]) if "jax" in memory else "—",
        memory_text("shardc"),
        memory_text(COST_AWARE),
        times_text(row.get("lower_seconds") or {}),
        times_text(row.get("compile_seconds") or {}),
        times_text(calls),
        " / ".join(predicted_bytes_text(row, route) for route in SHARDC_ROUTES),
        " / ".join(predicted_memory_text(row, route) for route in SHARDC_ROUTES),
    ]  # fmt: skip
    return "| " + " | ".join(cells) + " |"


def markdown_table(rows: list[dict[str, Any]]) -> str:
    return "\n".join([HEADER, ALIGN, *(format_row(row) for row in rows)])
