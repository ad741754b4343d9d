"""Time shardc's Python propagation against jaxlib's native Shardy pass, same module.

A JAX transformer (attention + MLP blocks, layer norm) of 4, 32, 128 and 512
layers (about 0.3k, 2.2k, 8.8k and 35k ops, so that time per op can be seen to
stay flat from 1k to 35k ops) is lowered with ``shardc.compiler.jit`` with
data/model shardings on the parameters and without propagation. Two tables:

In-process: the module inlined and given data-flow edges; both
``sdy-user-priority-propagate`` routes (ours via
``shardc.compiler.propagation.propagate``; native via ``PassManager``) run
on fresh parses of the same text, interleaved round by round; parsing is not
timed.

Whole-process: a fresh process per run, interpreter start-up included.
Ours is ``shardc-opt FILE -sdy-propagation-pipeline -o OUT``; Shardy's is a
Python process that parses the same file with jaxlib's MLIR (the context
``shardc.dialects.make_context`` builds), runs the native
``sdy-propagation-pipeline`` through ``PassManager`` and prints the module to
a file. Wall and CPU (user + sys) time and peak resident memory
(``ru_maxrss``) come from each child's own ``wait4`` rusage; a 0-layer
module gives each route's start-up cost, and time per op is the CPU time
beyond it. Both children
run with a warm bytecode cache, as from an installed package (one untimed run
of each first), and their outputs are compared byte for byte.

Prints the tables (median ms, ratio ours/native, µs per op) and writes JSON
(default ``bench/propagation.json``).

    python -m bench.propagation [--layers 4 32 128 512] [--rounds N] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
from jax.sharding import AxisType, NamedSharding  # noqa: E402
from jax.sharding import PartitionSpec as P  # noqa: E402
from jaxlib.mlir import ir, passmanager  # noqa: E402

import shardc.compiler as sc  # noqa: E402
from shardc.compiler.propagation import propagate  # noqa: E402
from shardc.dialects import make_context  # noqa: E402

D, HEADS, FF, SEQ, BATCH = 64, 4, 256, 32, 8
STRATEGY = "user-priority"
NATIVE = "sdy-user-priority-propagate"


def _layer_norm(x):
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) * jax.lax.rsqrt(var + 1e-5)


def transformer(params, x):
    """Pre-norm transformer blocks, unrolled (one block per layer)."""
    for p in params:
        h = _layer_norm(x)
        q = (h @ p["wq"]).reshape(BATCH, SEQ, HEADS, D // HEADS)
        k = (h @ p["wk"]).reshape(BATCH, SEQ, HEADS, D // HEADS)
        v = (h @ p["wv"]).reshape(BATCH, SEQ, HEADS, D // HEADS)
        a = jax.nn.softmax(jnp.einsum("bqhd,bkhd->bhqk", q, k) / 8.0, axis=-1)
        o = jnp.einsum("bhqk,bkhd->bqhd", a, v).reshape(BATCH, SEQ, D)
        x = x + o @ p["wo"]
        h = _layer_norm(x)
        x = x + jnp.maximum(h @ p["w1"], 0.0) @ p["w2"]
    return x


def transformer_program(layers: int) -> tuple[Callable, tuple, tuple]:
    """``(fun, args, in_shardings)`` of the ``layers``-block transformer: abstract
    arguments (``ShapeDtypeStruct``) and data/model shardings on an abstract 2x4 mesh."""
    mesh = jax.sharding.AbstractMesh((2, 4), ("data", "model"),
                                     axis_types=(AxisType.Auto,) * 2)
    col, row = NamedSharding(mesh, P(None, "model")), NamedSharding(mesh, P("model", None))
    shapes = {"wq": (D, D), "wk": (D, D), "wv": (D, D), "wo": (D, D), "w1": (D, FF), "w2": (FF, D)}
    specs = {"wq": col, "wk": col, "wv": col, "wo": row, "w1": col, "w2": row}
    params = [{k: jax.ShapeDtypeStruct(s, jnp.float32) for k, s in shapes.items()}
              for _ in range(layers)]
    x = jax.ShapeDtypeStruct((BATCH, SEQ, D), jnp.float32)
    return transformer, (params, x), ([specs] * layers, NamedSharding(mesh, P("data")))


def unpropagated_text(layers: int) -> str:
    """The lowered module, shardings only where the program gives them."""
    fun, args, in_shardings = transformer_program(layers)
    return sc.jit(fun, in_shardings=in_shardings).lower(*args, propagate=False).as_text()


def lowered_text(text: str) -> str:
    """The module to propagate in process: ``text`` inlined, with data-flow edges."""
    context = make_context()
    module = ir.Module.parse(text, context)
    passmanager.PassManager.parse("builtin.module(inline,symbol-dce,sdy-add-data-flow-edges)",
                                  context).run(module.operation)
    return str(module)


def count_ops(module: ir.Module) -> int:
    """Ops nested in the module (not the module itself)."""
    count = [0]

    def visit(op):
        count[0] += 1
        return ir.WalkResult.ADVANCE

    module.operation.walk(visit)
    return count[0] - 1


def run_once(text: str, route: str) -> tuple[float, str]:
    """Seconds for one propagation of a fresh parse, and the printed result."""
    context = make_context()
    module = ir.Module.parse(text, context)
    if route == "native":
        pm = passmanager.PassManager.parse(f"builtin.module({NATIVE})", context)
        start = time.perf_counter()
        pm.run(module.operation)
    else:
        start = time.perf_counter()
        propagate(module.operation, plan=STRATEGY)
    elapsed = time.perf_counter() - start
    return elapsed, str(module)


def measure(layers: int, rounds: int, unpropagated: str) -> dict:
    """Interleaved timings of both routes on one transformer size."""
    text = lowered_text(unpropagated)
    ops = count_ops(ir.Module.parse(text, make_context()))
    times = {"ours": [], "native": []}
    outputs = {}
    for _ in range(rounds):
        for route in ("native", "ours"):
            elapsed, outputs[route] = run_once(text, route)
            times[route].append(elapsed)
    ours, native = statistics.median(times["ours"]), statistics.median(times["native"])
    return {
        "layers": layers, "ops": ops, "rounds": rounds,
        "ours_ms": ours * 1e3, "native_ms": native * 1e3, "ratio": ours / native,
        "ours_us_per_op": ours * 1e6 / ops, "native_us_per_op": native * 1e6 / ops,
        "identical_output": outputs["ours"] == outputs["native"],
    }


# Shardy's process: jaxlib's MLIR only (no jax), the native pipeline, printed to a file.
SHARDY_PROCESS = """
import sys
from jaxlib.mlir import ir, passmanager
from shardc.dialects import make_context
context = make_context()
with open(sys.argv[1], "rb") as f:
    module = ir.Module.parse(f.read(), context)
passmanager.PassManager.parse("builtin.module(sdy-propagation-pipeline)", context).run(
    module.operation)
with open(sys.argv[2], "w", encoding="utf-8") as f:
    f.write(module.operation.get_asm(assume_verified=True))
"""
WHOLE_PROCESS_PASS = "-sdy-propagation-pipeline"
PER_OP_MIN_OPS = 1000


def process_commands(path: str, out: dict[str, str]) -> dict[str, list[str]]:
    """The command line of each route's process, reading ``path``, writing ``out[route]``."""
    script = os.path.join(os.path.dirname(sys.executable), "shardc-opt")
    ours = ([script] if os.path.exists(script)
            else [sys.executable, "-P", "-m", "shardc.tools.shardc_opt"])
    return {
        "native": [sys.executable, "-P", "-c", SHARDY_PROCESS, path, out["native"]],
        "ours": [*ours, path, WHOLE_PROCESS_PASS, "-o", out["ours"]],
    }


def process_env(pycache: str) -> dict[str, str]:
    """The children's environment: bytecode cached (in ``pycache``), as when installed."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPYCACHEPREFIX"] = pycache
    return env


# Runs one child and prints its own rusage. The children are started from this
# small process, not from the benchmark: a child's ru_maxrss counts the memory
# of the process it was forked from (the benchmark holds jax, ~200 MiB).
LAUNCHER = """
import json, os, sys, time
start = time.perf_counter()
pid = os.posix_spawn(sys.argv[1], sys.argv[1:], os.environ,
                     file_actions=[(os.POSIX_SPAWN_OPEN, 1, os.devnull, os.O_WRONLY, 0)])
_, status, usage = os.wait4(pid, 0)
wall = time.perf_counter() - start
print(json.dumps({"status": os.waitstatus_to_exitcode(status), "wall": wall,
                  "cpu": usage.ru_utime + usage.ru_stime, "rss_kib": usage.ru_maxrss}))
"""


def run_process(command: list[str], env: dict[str, str]) -> dict[str, float]:
    """Run one child to completion: wall and CPU seconds, peak RSS in MiB (its own rusage)."""
    launched = subprocess.run([sys.executable, "-S", "-c", LAUNCHER, *command], env=env,
                              capture_output=True, text=True, check=True)
    result = json.loads(launched.stdout.splitlines()[-1])
    if result["status"]:
        raise RuntimeError(f"{command[:3]} failed ({result['status']}): {launched.stderr[-2000:]}")
    # Linux reports ru_maxrss in KiB.
    return {"wall": result["wall"], "cpu": result["cpu"], "rss": result["rss_kib"] / 1024}


def measure_processes(layers: int, rounds: int, text: str, workdir: str) -> dict:
    """Interleaved whole-process runs of both routes on one transformer size (``text``)."""
    path = os.path.join(workdir, f"transformer_{layers}.mlir")
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
    ops = count_ops(ir.Module.parse(text, make_context()))
    out = {route: os.path.join(workdir, f"{route}_{layers}.mlir") for route in ("native", "ours")}
    commands = process_commands(path, out)
    env = process_env(os.path.join(workdir, "pycache"))
    runs: dict[str, list[dict]] = {"ours": [], "native": []}
    for round_ in range(rounds + 1):
        for route in ("native", "ours"):
            result = run_process(commands[route], env)
            if round_:  # round 0 warms the bytecode and file caches
                runs[route].append(result)
    row: dict = {"layers": layers, "ops": ops, "rounds": rounds}
    for route in ("ours", "native"):
        row[f"{route}_wall_ms"] = statistics.median(r["wall"] for r in runs[route]) * 1e3
        row[f"{route}_cpu_ms"] = statistics.median(r["cpu"] for r in runs[route]) * 1e3
        row[f"{route}_peak_mib"] = max(r["rss"] for r in runs[route])
    with open(out["ours"], "rb") as a, open(out["native"], "rb") as b:
        row["identical_output"] = a.read() == b.read()
    row["wall_ratio"] = row["ours_wall_ms"] / row["native_wall_ms"]
    row["cpu_ratio"] = row["ours_cpu_ms"] / row["native_cpu_ms"]
    row["peak_ratio"] = row["ours_peak_mib"] / row["native_peak_mib"]
    return row


def add_per_op(rows: list[dict], start_up: dict) -> None:
    """CPU µs per op of each row beyond what the 0-layer module (start-up) costs.

    Left out below ``PER_OP_MIN_OPS`` ops, where the difference is within the
    start-up's own noise.
    """
    for row in rows:
        if row["ops"] < PER_OP_MIN_OPS:
            continue
        ops = row["ops"] - start_up["ops"]
        for route in ("ours", "native"):
            extra = row[f"{route}_cpu_ms"] - start_up[f"{route}_cpu_ms"]
            row[f"{route}_cpu_us_per_op"] = extra * 1e3 / ops


def print_tables(rows: list[dict], process_rows: list[dict]) -> None:
    """The in-process table, then the whole-process one."""
    print("in process (sdy-user-priority-propagate, parse not timed):")
    print(f"{'layers':>6} {'ops':>6} {'ours ms':>9} {'native ms':>9} {'ratio':>6} "
          f"{'ours us/op':>10} {'native us/op':>12} same")
    for r in rows:
        print(f"{r['layers']:>6} {r['ops']:>6} {r['ours_ms']:>9.1f} {r['native_ms']:>9.1f} "
              f"{r['ratio']:>6.2f} {r['ours_us_per_op']:>10.1f} {r['native_us_per_op']:>12.1f} "
              f"{r['identical_output']}")
    print(f"whole process ({WHOLE_PROCESS_PASS}: start-up, parse, pipeline, print to a file; "
          f"us/op: CPU beyond the 0-layer start-up row, from {PER_OP_MIN_OPS} ops):")
    print(f"{'layers':>6} {'ops':>6} {'ours wall':>9} {'nat wall':>9} {'ratio':>5} "
          f"{'ours cpu':>9} {'nat cpu':>9} {'ratio':>5} {'ours us/op':>10} {'nat us/op':>9} "
          f"{'ours MiB':>8} {'nat MiB':>8} {'ratio':>5} same")
    for r in process_rows:
        per_op = (f"{r['ours_cpu_us_per_op']:>10.1f} {r['native_cpu_us_per_op']:>9.1f}"
                  if "ours_cpu_us_per_op" in r else f"{'':>10} {'':>9}")
        print(f"{r['layers']:>6} {r['ops']:>6} {r['ours_wall_ms']:>9.0f} "
              f"{r['native_wall_ms']:>9.0f} {r['wall_ratio']:>5.2f} {r['ours_cpu_ms']:>9.0f} "
              f"{r['native_cpu_ms']:>9.0f} {r['cpu_ratio']:>5.2f} {per_op} "
              f"{r['ours_peak_mib']:>8.0f} {r['native_peak_mib']:>8.0f} {r['peak_ratio']:>5.2f} "
              f"{r['identical_output']}")


def main() -> None:
    """Measure, print the tables, write JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, nargs="+", default=[4, 32, 128, 512])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--json", default=os.path.join(os.path.dirname(__file__),
                                                       "propagation.json"))
    args = parser.parse_args()

    def rounds(layers: int) -> int:
        return args.rounds if layers < 128 else max(3, args.rounds // 2)

    texts = {n: unpropagated_text(n) for n in [0, *args.layers]}
    rows = [measure(n, rounds(n), texts[n]) for n in args.layers]
    workdir = tempfile.mkdtemp(prefix="bench_propagation_")
    try:
        process_rows = [measure_processes(n, rounds(n), texts[n], workdir) for n in texts]
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    add_per_op(process_rows[1:], process_rows[0])
    print_tables(rows, process_rows)
    with open(args.json, "w") as f:
        json.dump({"strategy": STRATEGY, "rows": rows, "whole_process": process_rows}, f,
                  indent=2)


if __name__ == "__main__":
    main()
