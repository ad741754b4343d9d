"""Per-call cost of shardc's jit against ``jax.jit``, on 8 CPU devices.

Two tables. *Wall time*: both routes run the same function on the same
(already placed) inputs, interleaved round by round so machine noise hits both
alike; every call is blocked on (collective programs must not overlap on 2
cores); the median and minimum microseconds per call of each route and the
ratio shardc / jax.jit (the anchor). *Caller CPU*: the CPU time of the calling
thread (and of the whole process) per steady-state call of ``jit(f)(x)``,
``compiled(x)`` (``jit(f).lower(x).compile()``) and both with
``donate_argnums=0`` (every call on fresh inputs, placed before the clock
starts and let go before it stops, as a loop ``x = f(x)`` lets them go), for a
list of 1 and of 20 arrays, medians over the calls, the routes interleaved call
by call; for donating calls also jax.jit's followed by ``delete()`` of the
donated arrays, as shardc's calls delete them. Writes both
tables as JSON, and the second into the README (``--readme``).

    python -m bench.dispatch [--rounds N] [--calls N] [--json PATH] [--readme README.md]
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import pathlib
import statistics
import subprocess
import time

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax.sharding import AxisType, NamedSharding  # noqa: E402
from jax.sharding import PartitionSpec as P  # noqa: E402

from bench.render_readme import splice  # noqa: E402
from shardc.compiler import jit  # noqa: E402

START, END = "<!-- calls:start -->", "<!-- calls:end -->"


def cases(mesh):
    """(name, function, arguments, in_shardings, out_shardings)."""
    rng = np.random.default_rng(0)

    def put(shape, spec):
        return jax.device_put(rng.standard_normal(shape, np.float32), NamedSharding(mesh, spec))

    tiny = (put((16, 8), P("x", "y")), put((16, 8), P("x", "y")))
    medium = (put((512, 256), P("x", "y")), put((256, 512), P("y")))
    params = {"w1": put((256, 512), P(None, "y")), "w2": put((512, 256), P("y"))}
    leaves = {f"p{i:04d}": put((8,), P("x")) for i in range(1000)}
    return [
        ("tiny a*b+1", lambda a, b: a * b + 1, tiny, P("x", "y")),
        ("tiny sum (all-reduce)", lambda a, b: (a * b).sum(), tiny, P()),
        ("medium matmul", lambda a, b: jnp.tanh(a @ b), medium, P("x")),
        ("medium MLP pytree", lambda p, x: jax.nn.relu(x @ p["w1"]) @ p["w2"],
         (params, put((512, 256), P("x"))), P("x")),
        ("1000-leaf pytree", lambda p: {k: v + 1 for k, v in p.items()}, (leaves,), P("x")),
    ]


def time_calls(fn, args, calls: int) -> float:
    start = time.perf_counter()
    for _ in range(calls):
        jax.block_until_ready(fn(*args))
    return (time.perf_counter() - start) / calls * 1e6


def double(xs):
    return [x * 2 for x in xs]


def placed(mesh, leaves: int) -> list:
    """A fresh list of ``leaves`` small arrays tiled over the mesh."""
    sharding = NamedSharding(mesh, P("x", "y"))
    return [jax.device_put(np.ones((16, 8), np.float32), sharding) for _ in range(leaves)]


def call_kinds(route, xs) -> dict:
    """The calls timed on one route (``jax.jit`` or shardc's ``jit``): name -> (the
    callable, whether it donates its argument)."""
    donating = route(double, donate_argnums=0)
    return {
        "jit(f)(x)": (route(double), False),
        "compiled(x)": (route(double).lower(xs).compile(), False),
        "jit(f, donate_argnums=0)(x)": (donating, True),
        "compiled(x), donating": (donating.lower(xs).compile(), True),
    }


def then_deleted(fn):
    """``fn``, whose donated arguments are then deleted as shardc's calls delete them:
    jax.jit's reference for what that costs (jax.jit leaves them holding consumed
    buffers, which crash its fast path when passed again)."""
    def call(xs):
        outputs = fn(xs)
        for x in xs:
            x.delete()
        return outputs
    return call


def caller_cpu(fn, given: list) -> tuple[float, float]:
    """Microseconds of CPU of one call of ``fn`` on the argument ``given`` holds,
    blocked on: the calling thread's, and the whole process's (XLA's threads
    included). The argument is taken out of ``given`` for the call: where that
    held the last reference (a donating call's fresh arrays) it goes before the
    clock stops, as the previous state does in a loop ``x = f(x)``. Releasing
    the buffers a call consumed is paid there, by jax.jit's caller when its
    arrays go, by shardc's call when it deletes them."""
    thread, process = time.thread_time(), time.process_time()
    jax.block_until_ready(fn(given.pop()))
    return (time.thread_time() - thread) * 1e6, (time.process_time() - process) * 1e6


def call_rows(mesh, rounds: int, calls: int, leaf_counts=(1, 20)) -> list[dict]:
    """Caller CPU of jax.jit's and shardc's calls, interleaved call by call (medians
    of ``rounds`` x ``calls`` calls of each)."""
    rows = []
    for leaves in leaf_counts:
        xs = placed(mesh, leaves)
        kinds = {"jax.jit": call_kinds(jax.jit, xs), "shardc": call_kinds(jit, xs)}
        for kind, (jax_fn, donates) in kinds["jax.jit"].items():
            routes = {"jax.jit": jax_fn, "shardc": kinds["shardc"][kind][0]}
            if donates:
                routes["jax.jit, then delete()"] = then_deleted(jax_fn)
            for fn in routes.values():  # compile and warm up outside the timing
                for _ in range(3):
                    jax.block_until_ready(fn(placed(mesh, leaves) if donates else xs))
            samples: dict = {route: [] for route in routes}
            for _ in range(rounds * calls):
                for route, fn in routes.items():
                    samples[route].append(caller_cpu(fn, [placed(mesh, leaves) if donates
                                                          else xs]))
            thread = {r: statistics.median(t for t, _ in s) for r, s in samples.items()}
            process = {r: statistics.median(p for _, p in s) for r, s in samples.items()}
            row = {
                "call": kind, "leaves": leaves,
                "jax_thread_us": round(thread["jax.jit"], 1),
                "shardc_thread_us": round(thread["shardc"], 1),
                "thread_ratio": round(thread["shardc"] / thread["jax.jit"], 3),
                "jax_process_us": round(process["jax.jit"], 1),
                "shardc_process_us": round(process["shardc"], 1),
                "process_ratio": round(process["shardc"] / process["jax.jit"], 3),
            }
            if donates:
                deleting = thread["jax.jit, then delete()"]
                row["jax_deleting_thread_us"] = round(deleting, 1)
                row["deleting_ratio"] = round(thread["shardc"] / deleting, 3)
            rows.append(row)
    return rows


def call_table(rows: list[dict]) -> list[str]:
    lines = ["| call | arrays | jax.jit µs | shardc µs | shardc / jax.jit "
             "| jax.jit, then `delete()` µs | shardc / that | process CPU, shardc / jax.jit |",
             "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        deleting = (f"{r['jax_deleting_thread_us']} | {r['deleting_ratio']:.2f}×"
                    if "deleting_ratio" in r else "|")
        lines.append(f"| `{r['call']}` | {r['leaves']} | {r['jax_thread_us']} | "
                     f"{r['shardc_thread_us']} | {r['thread_ratio']:.2f}× | {deleting} | "
                     f"{r['process_ratio']:.2f}× |")
    return lines


def readme_section(rows: list[dict], rounds: int, calls: int) -> str:
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True, cwd=pathlib.Path(__file__).parent).stdout.strip()
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    intro = (f"`python -m bench.dispatch` (jax {jax.__version__}; shardc {commit}; 8 cpu "
             f"devices; {stamp}; load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} "
             "cores): `f` doubles a list of (16, 8) float32 arrays tiled over a "
             "4x2 mesh; µs = CPU time of the calling thread per call, blocked on (the last "
             "column: of the whole process, XLA's threads included); medians of "
             f"{rounds * calls} calls of each, the routes interleaved call by call; donating "
             "calls take fresh arrays, placed before the clock starts and let go before it "
             "stops (as a loop `x = f(x)` lets the previous `x` go: jax.jit's caller "
             "frees the consumed buffers there); \"jax.jit, then "
             "`delete()`\" deletes the donated arrays after jax.jit's call, as shardc's "
             "calls do.")
    return "\n" + intro + "\n\n" + "\n".join(call_table(rows)) + "\n"


def wall_rows(mesh, rounds: int, calls: int, only: list | None) -> list[dict]:
    """Wall time per call of jax.jit's and shardc's jit, interleaved round by round."""
    rows = []
    for name, fun, args, out_spec in cases(mesh):
        if only and name not in only:
            continue
        out_sharding = NamedSharding(mesh, out_spec)
        routes = {
            "jax.jit": jax.jit(fun, out_shardings=out_sharding),
            "shardc": jit(fun, out_shardings=out_sharding),
        }
        for fn in routes.values():  # compile and warm up outside the timing
            for _ in range(3):
                jax.block_until_ready(fn(*args))
        samples = {route: [] for route in routes}
        for _ in range(rounds):
            for route, fn in routes.items():
                samples[route].append(time_calls(fn, args, calls))
        medians = {route: statistics.median(s) for route, s in samples.items()}
        rows.append({
            "case": name,
            "jax_us_median": round(medians["jax.jit"], 1),
            "shardc_us_median": round(medians["shardc"], 1),
            "jax_us_min": round(min(samples["jax.jit"]), 1),
            "shardc_us_min": round(min(samples["shardc"]), 1),
            "ratio_median": round(medians["shardc"] / medians["jax.jit"], 3),
        })
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--calls", type=int, default=100)
    parser.add_argument("--json", default="bench/dispatch.json")
    parser.add_argument("--only", action="append", metavar="CASE",
                        help="run only this case of the wall-time table")
    parser.add_argument("--table", choices=("wall", "cpu", "both"), default="both")
    parser.add_argument("--readme", help="write the caller-CPU table into this README")
    options = parser.parse_args()

    mesh = jax.make_mesh((4, 2), ("x", "y"), axis_types=(AxisType.Auto,) * 2)
    result: dict = {"devices": 8, "rounds": options.rounds, "calls": options.calls}
    if options.table in ("wall", "both"):
        rows = result["rows"] = wall_rows(mesh, options.rounds, options.calls, options.only)
        header = "| case | jax.jit µs (median / min) | shardc µs (median / min) | shardc / jax.jit |"
        print(header + "\n|---|---|---|---|")
        for row in rows:
            print(f"| {row['case']} | {row['jax_us_median']} / {row['jax_us_min']} | "
                  f"{row['shardc_us_median']} / {row['shardc_us_min']} | {row['ratio_median']} |")
    if options.table in ("cpu", "both"):
        rows = result["calls_cpu"] = call_rows(mesh, options.rounds, options.calls)
        print("\n".join(call_table(rows)))
        if options.readme:
            readme = pathlib.Path(options.readme)
            readme.write_text(splice(readme.read_text(),
                                     readme_section(rows, options.rounds, options.calls),
                                     START, END))
    with open(options.json, "w") as handle:
        json.dump(result, handle, indent=2)


if __name__ == "__main__":
    main()
