"""AUTO shardings against hand-written ones: search time and modelled step time.

``python -m bench.auto_search [--only NAME] [--check] [--budget]`` (8 CPU devices,
``XLA_FLAGS=--xla_force_host_platform_device_count=8``). For each program, the
AUTO search's wall time (``lower()`` of ``jit(..., in_shardings=AUTO,
out_shardings=AUTO)``, tracing and the final lowering included, and the
search alone) and the modelled step time (``shardc.compiler.auto.objective``)
of its choice, of the expert configuration (FSDP on ``data`` x Megatron tensor
parallel on ``model``), of data parallel (batch over the whole mesh, weights
replicated) and of everything replicated. ``--budget`` searches within the
expert's memory as ``Lowered.memory_estimate`` models it (``memory_budget``). ``--check`` also runs the AUTO
program and compares its results with ``jax.jit``'s given the same shardings (the
largest absolute difference) and with one device's (the largest difference relative
to the largest value: float reassociation of partial sums).
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P

from bench.zoo import lm_linen_unconstrained
from shardc.compiler import AUTO, jit
from shardc.compiler.auto import modelled_step


@dataclass
class Case:
    name: str
    fun: Callable
    args: tuple
    mesh: Any
    # name -> in_shardings (a tree of PartitionSpecs or NamedShardings over args)
    configs: dict[str, Any]
    mesh_context: bool = False


def _mesh(shape=(2, 4)):
    return jax.make_mesh(shape, ("data", "model"), axis_types=(AxisType.Auto,) * 2)


def _normal(key, shape, scale=0.02):
    return np.asarray(jax.random.normal(key, shape) * scale, np.float32)


# -- a residual MLP stack -----------------------------------------------------------

def _mlp_loss(params, x, y):
    h = x
    for w1, w2 in params:
        h = h + jax.nn.relu(h @ w1) @ w2
    return jnp.mean((h - y) ** 2)


def mlp_step(params, x, y):
    grads = jax.grad(_mlp_loss)(params, x, y)
    return jax.tree.map(lambda w, g: w - 0.1 * g, params, grads)


def mlp_case(layers=32, d=256, hidden=1024, batch=64) -> Case:
    keys = jax.random.split(jax.random.key(0), 2 * layers + 2)
    params = [(_normal(keys[2 * i], (d, hidden)), _normal(keys[2 * i + 1], (hidden, d)))
              for i in range(layers)]
    x, y = _normal(keys[-2], (batch, d), 1.0), _normal(keys[-1], (batch, d), 1.0)

    def config(w1, w2, batch_spec):
        return ([(w1, w2)] * layers, batch_spec, batch_spec)

    return Case(f"mlp_{layers}_layers", mlp_step, (params, x, y), _mesh(), {
        "expert (FSDP data x TP model)": config(P("data", "model"), P("model", "data"),
                                                P("data")),
        "data parallel": config(P(), P(), P(("data", "model"))),
        "replicated": config(P(), P(), P()),
    })


# -- a Llama-like decoder: RMSNorm, attention, SwiGLU ------------------------------

def _rms(x, scale):
    return x * jax.lax.rsqrt(jnp.mean(x * x, axis=-1, keepdims=True) + 1e-6) * scale


def _llama_loss(params, x, y, heads):
    b, s, d = x.shape
    mask = jnp.tril(jnp.ones((s, s), bool))
    h = x
    for layer in params["layers"]:
        a = _rms(h, layer["norm1"])
        q = (a @ layer["wq"]).reshape(b, s, heads, d // heads)
        k = (a @ layer["wk"]).reshape(b, s, heads, d // heads)
        v = (a @ layer["wv"]).reshape(b, s, heads, d // heads)
        scores = jnp.einsum("bqhd,bkhd->bhqk", q, k) / np.sqrt(d // heads)
        probs = jax.nn.softmax(jnp.where(mask, scores, -1e9), axis=-1)
        mixed = jnp.einsum("bhqk,bkhd->bqhd", probs, v).reshape(b, s, d)
        h = h + mixed @ layer["wo"]
        m = _rms(h, layer["norm2"])
        h = h + (jax.nn.silu(m @ layer["w_gate"]) * (m @ layer["w_up"])) @ layer["w_down"]
    return jnp.mean((_rms(h, params["norm"]) - y) ** 2)


def llama_step(params, x, y):
    grads = jax.grad(_llama_loss)(params, x, y, 8)
    return jax.tree.map(lambda w, g: w - 0.01 * g, params, grads)


def llama_case(layers=4, d=256, hidden=688, batch=16, seq=64) -> Case:
    hidden = hidden - hidden % 8
    keys = iter(jax.random.split(jax.random.key(1), 8 * layers + 3))
    params = {"layers": [{
        "norm1": np.ones(d, np.float32), "norm2": np.ones(d, np.float32),
        "wq": _normal(next(keys), (d, d)), "wk": _normal(next(keys), (d, d)),
        "wv": _normal(next(keys), (d, d)), "wo": _normal(next(keys), (d, d)),
        "w_gate": _normal(next(keys), (d, hidden)), "w_up": _normal(next(keys), (d, hidden)),
        "w_down": _normal(next(keys), (hidden, d)),
    } for _ in range(layers)], "norm": np.ones(d, np.float32)}
    x = _normal(next(keys), (batch, seq, d), 1.0)
    y = _normal(next(keys), (batch, seq, d), 1.0)

    def config(column, row, norm, batch_spec):
        layer = {"norm1": norm, "norm2": norm, "wq": column, "wk": column, "wv": column,
                 "wo": row, "w_gate": column, "w_up": column, "w_down": row}
        return ({"layers": [layer] * layers, "norm": norm}, batch_spec, batch_spec)

    return Case(f"llama_{layers}_layers", llama_step, (params, x, y), _mesh(), {
        "expert (FSDP data x TP model)": config(P("data", "model"), P("model", "data"), P(),
                                                P("data")),
        "data parallel": config(P(), P(), P(), P(("data", "model"))),
        "replicated": config(P(), P(), P(), P()),
    })


# -- the zoo's flax LM train step, activation constraints removed ------------------

def lm_linen_case(size="large") -> Case:
    program = lm_linen_unconstrained.make(size)
    state_shardings, token_sharding = program.in_shardings
    mesh = program.mesh
    replicated = NamedSharding(mesh, P())
    return Case(f"lm_linen_unconstrained ({size})", program.fun, program.args, mesh, {
        "expert (FSDP data x TP model)": program.in_shardings,
        "data parallel": (jax.tree.map(lambda _: replicated, state_shardings),
                          NamedSharding(mesh, P("data"))),
        "replicated": (jax.tree.map(lambda _: replicated, state_shardings), replicated),
    }, mesh_context=True)


CASES = {"mlp32": mlp_case, "llama": llama_case, "llama32": lambda: llama_case(layers=32),
         "lm_linen": lm_linen_case}


def _named(config: Any, mesh) -> Any:
    return jax.tree.map(lambda s: s if isinstance(s, NamedSharding) else NamedSharding(mesh, s),
                        config, is_leaf=lambda s: isinstance(s, (P, NamedSharding)))


def _abstract(args):
    return jax.tree.map(lambda a: jax.ShapeDtypeStruct(np.shape(a), a.dtype), args)


def measure(case: Case, check: bool, budgeted: bool = False) -> dict:
    context = jax.set_mesh(case.mesh) if case.mesh_context else _Nothing()
    with context:
        abstract = _abstract(case.args)
        budget = None
        if budgeted:  # the expert's memory, as the budget's model (memory_estimate) puts it
            expert = next(iter(case.configs.values()))
            budget = jit(case.fun, in_shardings=_named(expert, case.mesh), mesh=case.mesh
                         ).trace(*abstract).lower().memory_estimate().net_bytes
        # Wall time on a shared machine is mostly the others' load: the process's CPU
        # seconds and the load average say what the search itself cost.
        start, cpu = time.perf_counter(), time.process_time()
        lowered = jit(case.fun, in_shardings=AUTO, out_shardings=AUTO, mesh=case.mesh,
                      memory_budget=budget).lower(*abstract)
        seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
        report = lowered.auto_report()
        row = {"program": case.name, "lower_s": seconds, "lower_cpu_s": round(cpu, 2),
               "load": round(os.getloadavg()[0], 1), "search_s": report.seconds,
               "states": report.evaluations, "groups": len(report.choices),
               "auto_ms": report.step.seconds * 1e3}
        if budgeted:
            row["budget"] = budget
            row["auto_memory"] = report.step.memory_peak
        for name, config in case.configs.items():
            unpropagated = jit(case.fun, in_shardings=_named(config, case.mesh),
                               mesh=case.mesh).trace(*abstract).lower(propagate=False)
            row[name] = modelled_step(unpropagated.module).seconds * 1e3
        if check:
            # Committed arguments must already have the compiled shardings, as with jax.jit.
            placed = jax.device_put(case.args, tuple(lowered.in_shardings[0]))
            got = lowered.compile()(*placed)
            given = jax.jit(case.fun, in_shardings=lowered.in_shardings[0],
                            out_shardings=lowered.out_shardings)(*placed)
            row["max_abs_diff_vs_jax_jit_given_choice"] = _max_difference(got, given)
            row["max_rel_error_vs_one_device"] = _max_difference(
                got, jax.jit(case.fun)(*case.args), relative=True)
        row["report"] = report.format_text()
    return row


def _max_difference(got: Any, want: Any, relative: bool = False) -> float:
    worst = 0.0
    for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(want), strict=True):
        a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
        scale = (np.max(np.abs(b)) or 1.0) if relative else 1.0
        worst = max(worst, float(np.max(np.abs(a - b), initial=0.0)) / scale)
    return worst


class _Nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", action="append", choices=sorted(CASES))
    parser.add_argument("--check", action="store_true")
    parser.add_argument("--report", action="store_true", help="print each search's report")
    parser.add_argument("--budget", action="store_true",
                        help="search within the expert's modelled memory (memory_budget)")
    options = parser.parse_args()
    for name in options.only or list(CASES):
        row = measure(CASES[name](), options.check, options.budget)
        report = row.pop("report")
        print(" | ".join(f"{k}={v:.3f}" if isinstance(v, float) else f"{k}={v}"
                         for k, v in row.items()), flush=True)
        if options.report:
            print(report)


if __name__ == "__main__":
    main()
