"""Planning a pod job: lowering, ``comm_report()`` and ``memory_estimate()`` of a
Llama-2-7B-shaped train step on an ``AbstractMesh`` of up to 16,384 devices.

The step (32 layers, d_model 4096, 32 heads, ffn 11008, vocab 32000, f32
parameters; loss, gradients and an SGD update) is written three ways: layers
unrolled, layers under ``lax.scan``, and scanned layers under
``jax.checkpoint``. Parameters are FSDP x TP sharded (``data`` x ``model``),
the batch over ``data``. No device is touched: the arguments are
``ShapeDtypeStruct``s on an ``AbstractMesh``, so the plan costs the same
whatever the device count; the table shows that it does. Prints a table of
seconds per stage (lowering, comm_report, memory_estimate) with the predicted
collective bytes per device per step (``step_totals``: loop bodies once per
iteration; and ``totals``: once), the estimated per-device total, and JSON.
``--clock cpu`` times this thread's CPU time instead of wall time (steadier on
a machine shared with other work). ``--readme README.md`` also writes the table
between its ``<!-- plan:start -->`` and ``<!-- plan:end -->`` markers, next to
the seconds of an earlier run's ``--json`` given as ``--before``. Run:
``python -m bench.plan_speed [--devices 16 256 4096 16384] [--variants unrolled
scan remat] [--layers 32] [--dtype f32|bf16] [--clock wall|cpu] [--json PATH]
[--readme README.md [--before BEFORE.json]]``.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import pathlib
import time

import jax
import jax.numpy as jnp
from jax.sharding import AbstractMesh, AxisType, NamedSharding
from jax.sharding import PartitionSpec as P

from bench.render_readme import splice
from shardc.compiler import jit

# Llama-2-7B's shape.
LAYERS, D_MODEL, HEADS, FFN, VOCAB = 32, 4096, 32, 11008, 32000
SEQ = 2048
TP = 16
VARIANTS = ("unrolled", "scan", "remat")
DEVICES = (16, 256, 4096, 16384)
CLOCKS = {"wall": time.perf_counter, "cpu": time.thread_time}
DTYPES = {"f32": jnp.float32, "bf16": jnp.bfloat16}


def mesh_of(devices: int) -> AbstractMesh:
    """FSDP x TP: ``model`` of 16 devices, ``data`` of the rest."""
    return AbstractMesh((devices // TP, TP), ("data", "model"),
                        axis_types=(AxisType.Auto, AxisType.Auto))


def _layer_specs() -> dict:
    return {"attn_norm": P(None), "wq": P("data", "model"), "wk": P("data", "model"),
            "wv": P("data", "model"), "wo": P("model", "data"), "ffn_norm": P(None),
            "w1": P("data", "model"), "w3": P("data", "model"), "w2": P("model", "data")}


def _layer_shapes(d: int, ffn: int, kv: int) -> dict:
    # ``kv``: the width of the keys and values (d, or fewer under grouped-query attention)
    return {"attn_norm": (d,), "wq": (d, d), "wk": (d, kv), "wv": (d, kv), "wo": (d, d),
            "ffn_norm": (d,), "w1": (d, ffn), "w3": (d, ffn), "w2": (ffn, d)}


def _rms_norm(x, scale):
    return x * jax.lax.rsqrt(jnp.mean(x * x, axis=-1, keepdims=True) + 1e-5) * scale


def _block(x, p, heads: int, mesh: AbstractMesh):
    # FSDP keeps the activations batch-sharded (the weights are gathered for each
    # matmul), TP splits the heads and the hidden units
    x = jax.lax.with_sharding_constraint(x, NamedSharding(mesh, P("data", None, None)))
    batch, seq, d = x.shape
    h = _rms_norm(x, p["attn_norm"])
    q = (h @ p["wq"]).reshape(batch, seq, heads, d // heads)
    # grouped-query attention: each key and value head serves heads // kv_heads queries
    kv_heads = p["wk"].shape[-1] // (d // heads)
    k = (h @ p["wk"]).reshape(batch, seq, kv_heads, d // heads)
    v = (h @ p["wv"]).reshape(batch, seq, kv_heads, d // heads)
    if kv_heads < heads:
        k, v = (jnp.repeat(t, heads // kv_heads, axis=2) for t in (k, v))
    q, k, v = (jax.lax.with_sharding_constraint(
        t, NamedSharding(mesh, P("data", None, "model", None))) for t in (q, k, v))
    scores = jnp.einsum("bqhd,bkhd->bhqk", q, k) / jnp.sqrt(d // heads).astype(x.dtype)
    mask = jnp.tril(jnp.ones((seq, seq), bool))
    scores = jnp.where(mask, scores, jnp.finfo(x.dtype).min)
    attn = jnp.einsum("bhqk,bkhd->bqhd", jax.nn.softmax(scores, axis=-1), v)
    x = x + attn.reshape(batch, seq, d) @ p["wo"]
    h = _rms_norm(x, p["ffn_norm"])
    hidden = jax.nn.silu(h @ p["w1"]) * (h @ p["w3"])
    hidden = jax.lax.with_sharding_constraint(hidden, NamedSharding(mesh, P("data", None, "model")))
    return x + hidden @ p["w2"]


def make_step(variant: str, layers: int, heads: int, mesh: AbstractMesh):
    """The train step of ``variant`` on ``mesh``: unrolled, scan, or remat (scan of
    checkpointed layers)."""

    def forward(params, tokens):
        x = params["embed"][tokens]
        if variant == "unrolled":
            for p in params["layers"]:
                x = _block(x, p, heads, mesh)
        else:
            body = lambda x, p: _block(x, p, heads, mesh)  # noqa: E731
            if variant == "remat":
                body = jax.checkpoint(body)
            x, _ = jax.lax.scan(lambda x, p: (body(x, p), None), x, params["layers"])
        logits = _rms_norm(x, params["norm"]) @ params["out"]
        return logits

    def loss(params, tokens, targets):
        logits = forward(params, tokens)
        logp = jax.nn.log_softmax(logits, axis=-1)
        return -jnp.mean(jnp.take_along_axis(logp, targets[..., None], axis=-1))

    def step(params, tokens, targets):
        value, grads = jax.value_and_grad(loss)(params, tokens, targets)
        return jax.tree.map(lambda w, g: w - 1e-4 * g, params, grads), value

    return step


def abstract_args(variant: str, mesh: AbstractMesh, layers: int, *, d: int = D_MODEL,
                  ffn: int = FFN, vocab: int = VOCAB, seq: int = SEQ, batch: int | None = None,
                  dtype=jnp.float32, kv: int | None = None):
    """``ShapeDtypeStruct`` arguments (params, tokens, targets) sharded on ``mesh``;
    ``kv``: the keys' and values' width (default ``d``; fewer for grouped-query
    attention, a multiple of the head width)."""
    batch = batch if batch is not None else mesh.shape["data"]

    def spec(shape, p):
        return jax.ShapeDtypeStruct(shape, dtype, sharding=NamedSharding(mesh, p))

    shapes, specs = _layer_shapes(d, ffn, kv if kv is not None else d), _layer_specs()
    if variant == "unrolled":
        blocks = [{k: spec(shapes[k], specs[k]) for k in shapes} for _ in range(layers)]
    else:
        blocks = {k: spec((layers, *shapes[k]), P(None, *specs[k])) for k in shapes}
    params = {"embed": spec((vocab, d), P("model", "data")), "layers": blocks,
              "norm": spec((d,), P(None)), "out": spec((d, vocab), P("data", "model"))}
    tokens = jax.ShapeDtypeStruct((batch, seq), jnp.int32,
                                  sharding=NamedSharding(mesh, P("data", None)))
    return params, tokens, tokens


def plan(variant: str, devices: int, layers: int = LAYERS, *, heads: int = HEADS,
         clock=time.perf_counter, platform: str = "cpu", **shape) -> dict:
    """Lower the step for ``platform`` and report it; seconds per stage and the
    headline figures. The arguments name no devices (an AbstractMesh), so the
    platform is the lowering's, as jax.jit requires."""
    mesh = mesh_of(devices)
    args = abstract_args(variant, mesh, layers, **shape)
    step = jit(make_step(variant, layers, heads, mesh))
    gc.collect()
    start = clock()
    lowered = step.trace(*args).lower(lowering_platforms=(platform,))
    lowering = clock() - start
    start = clock()
    report = lowered.comm_report()
    comm = clock() - start
    start = clock()
    estimate = lowered.memory_estimate()
    memory = clock() - start
    return {"variant": variant, "devices": devices, "lowering_s": lowering, "comm_s": comm,
            "memory_s": memory, "total_s": lowering + comm + memory,
            "step_bytes": sum(t.bytes_per_device for t in report.step_totals().values()),
            "body_once_bytes": sum(t.bytes_per_device for t in report.totals().values()),
            "net_bytes": estimate.net_bytes}


README_MARKERS = ("<!-- plan:start -->", "<!-- plan:end -->")


def readme_table(data: dict, before: dict | None = None) -> str:
    """The rows of a run (``--json``'s form) as a markdown table: seconds per stage,
    after those of ``before`` (an earlier run of the same rows) when given."""
    stages = ("lowering_s", "comm_s", "memory_s", "total_s")

    def seconds(row: dict | None) -> str:
        return " / ".join(f"{row[k]:.2f}" for k in stages) if row else ""

    earlier = {(r["variant"], r["devices"]): r for r in (before or {}).get("rows", ())}
    head = ["variant", "devices"] + (["before: lower / comm / memory / total s"] if before
                                     else []) + ["lower / comm / memory / total s",
                                                 "comm GiB/step (bodies once)",
                                                 "net GiB/device"]
    lines = [f"{data['clock']} seconds, {data['layers']} layers, {data['dtype']}"
             + (f"; load average {data['load']:.1f}" if data.get("load") is not None else ""),
             "", "| " + " | ".join(head) + " |", "|---|" + "---:|" * (len(head) - 1)]
    for row in data["rows"]:
        cells = [row["variant"], str(row["devices"])]
        if before:
            cells.append(seconds(earlier.get((row["variant"], row["devices"]))))
        cells += [seconds(row), f"{row['step_bytes'] / 2**30:.2f} "
                  f"({row['body_once_bytes'] / 2**30:.2f})", f"{row['net_bytes'] / 2**30:.2f}"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n" + "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.plan_speed",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--devices", type=int, nargs="*", default=list(DEVICES))
    parser.add_argument("--variants", nargs="*", default=list(VARIANTS), choices=VARIANTS)
    parser.add_argument("--layers", type=int, default=LAYERS)
    parser.add_argument("--dtype", choices=sorted(DTYPES), default="f32",
                        help="parameter and activation type")
    parser.add_argument("--clock", choices=sorted(CLOCKS), default="wall",
                        help="wall time, or this thread's CPU time (steadier on a busy machine)")
    parser.add_argument("--json", help="also write the rows here")
    parser.add_argument("--readme", help="also write the table into this README's plan "
                        "section")
    parser.add_argument("--before", help="an earlier run's --json, shown next to this one "
                        "in the README's table")
    options = parser.parse_args(argv)
    print(f"{'variant':9} {'devices':>7} {'lower s':>8} {'comm s':>7} {'memory s':>8} "
          f"{'total s':>7} {'comm GiB/step':>13} {'(bodies once)':>13} {'net GiB/device':>14}")
    rows = []
    for variant in options.variants:
        for devices in options.devices:
            row = plan(variant, devices, options.layers, clock=CLOCKS[options.clock],
                       dtype=DTYPES[options.dtype])
            rows.append(row)
            print(f"{variant:9} {devices:7} {row['lowering_s']:8.2f} {row['comm_s']:7.2f} "
                  f"{row['memory_s']:8.2f} {row['total_s']:7.2f} "
                  f"{row['step_bytes'] / 2**30:13.2f} {row['body_once_bytes'] / 2**30:13.2f} "
                  f"{row['net_bytes'] / 2**30:14.2f}",
                  flush=True)
    data = {"layers": options.layers, "dtype": options.dtype, "clock": options.clock,
            "load": os.getloadavg()[0], "rows": rows}
    if options.json:
        with open(options.json, "w") as f:
            json.dump(data, f, indent=2)
    if options.readme:
        before = json.loads(pathlib.Path(options.before).read_text()) if options.before \
            else None
        readme = pathlib.Path(options.readme)
        readme.write_text(splice(readme.read_text(), readme_table(data, before),
                                 *README_MARKERS))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
