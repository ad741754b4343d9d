"""Time shardc's Python propagation against jaxlib's native Shardy pass, same module.

A JAX transformer (attention + MLP blocks, layer norm) of 4, 32, 128 and 512
layers (about 0.3k, 2.2k, 8.8k and 35k ops, so that time per op can be seen to
stay flat from 1k to 35k ops) is lowered with ``shardc.compiler.jit`` with data/model shardings on the
parameters, inlined, and given data-flow edges. For each size both
``sdy-user-priority-propagate`` routes (ours via
``shardc.compiler.propagation.propagate``; native via ``PassManager``) run
on fresh parses of the same text, interleaved round by round; parsing is not
timed. Prints a table (median ms, ratio ours/native, µs per op) and writes
JSON (default ``bench/propagation.json``).

    python -m bench.propagation [--layers 4 32 128 512] [--rounds N] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
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


def lowered_text(layers: int) -> str:
    """The module to propagate: lowered, inlined, with data-flow edges."""
    fun, args, in_shardings = transformer_program(layers)
    text = str(sc.jit(fun, in_shardings=in_shardings).lower(*args).module)
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


def measure(layers: int, rounds: int) -> dict:
    """Interleaved timings of both routes on one transformer size."""
    text = lowered_text(layers)
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


def main() -> None:
    """Measure, print the table, write JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, nargs="+", default=[4, 32, 128, 512])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--json", default=os.path.join(os.path.dirname(__file__),
                                                       "propagation.json"))
    args = parser.parse_args()
    rows = [measure(n, args.rounds if n < 128 else max(3, args.rounds // 2))
            for n in args.layers]
    print(f"{'layers':>6} {'ops':>6} {'ours ms':>9} {'native ms':>9} {'ratio':>6} "
          f"{'ours us/op':>10} {'native us/op':>12} same")
    for r in rows:
        print(f"{r['layers']:>6} {r['ops']:>6} {r['ours_ms']:>9.1f} {r['native_ms']:>9.1f} "
              f"{r['ratio']:>6.2f} {r['ours_us_per_op']:>10.1f} {r['native_us_per_op']:>12.1f} "
              f"{r['identical_output']}")
    with open(args.json, "w") as f:
        json.dump({"strategy": STRATEGY, "rows": rows}, f, indent=2)


if __name__ == "__main__":
    main()
