"""Per-call time of shardc-compiled functions against ``jax.jit``, on 8 CPU devices.

Both routes run the same function on the same (already placed) inputs,
interleaved round by round so machine noise hits both alike; every call is
blocked on (collective programs must not overlap on 2 cores). Reported: the
median and minimum microseconds per call of each route and the ratio
shardc / jax.jit (the anchor). Writes the table as JSON too.

    python -m bench.dispatch [--rounds N] [--calls N] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax.sharding import AxisType, NamedSharding  # noqa: E402
from jax.sharding import PartitionSpec as P  # noqa: E402

from shardc.compiler import jit  # noqa: E402


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--calls", type=int, default=100)
    parser.add_argument("--json", default="bench/dispatch.json")
    parser.add_argument("--only", action="append", metavar="CASE", help="run only this case")
    options = parser.parse_args()

    mesh = jax.make_mesh((4, 2), ("x", "y"), axis_types=(AxisType.Auto,) * 2)
    rows = []
    for name, fun, args, out_spec in cases(mesh):
        if options.only and name not in options.only:
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
        for _ in range(options.rounds):
            for route, fn in routes.items():
                samples[route].append(time_calls(fn, args, options.calls))
        medians = {route: statistics.median(s) for route, s in samples.items()}
        rows.append({
            "case": name,
            "jax_us_median": round(medians["jax.jit"], 1),
            "shardc_us_median": round(medians["shardc"], 1),
            "jax_us_min": round(min(samples["jax.jit"]), 1),
            "shardc_us_min": round(min(samples["shardc"]), 1),
            "ratio_median": round(medians["shardc"] / medians["jax.jit"], 3),
        })

    header = "| case | jax.jit µs (median / min) | shardc µs (median / min) | shardc / jax.jit |"
    print(header + "\n|---|---|---|---|")
    for row in rows:
        print(f"| {row['case']} | {row['jax_us_median']} / {row['jax_us_min']} | "
              f"{row['shardc_us_median']} / {row['shardc_us_min']} | {row['ratio_median']} |")
    with open(options.json, "w") as handle:
        json.dump({"devices": 8, "rounds": options.rounds, "calls": options.calls,
                   "rows": rows}, handle, indent=2)


if __name__ == "__main__":
    main()
