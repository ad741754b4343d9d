"""Communication and memory predicted per platform against XLA:TPU's compiled figures.

shardc's predictions (``Lowered.comm_report(platform=...)``,
``Lowered.memory_estimate(platform=...)``) are validated against XLA:CPU on every
zoo program (``bench/comm_report.py``, ``bench/memory_estimate.py``). This bench
checks the ``"tpu"`` platform's rules against XLA:TPU itself, from a host without
TPUs: libtpu compiles ahead of time for a topology's devices
(``jax.experimental.topologies``, a v5e slice by default), and shardc compiles the
same lowering for them (``Compiled.collectives()``, ``memory_analysis()``). Per
program it prints, per collective kind, the count and bytes per device predicted
for CPU and for TPU and those XLA:TPU compiled, then per memory field the TPU
estimate against XLA:TPU's (temporaries: the HBM its buffer assignment allocates
besides arguments and outputs, since a compile-only client's ``memory_analysis()``
reports none; the on-chip VMEM scratch it uses is printed alongside);
``--json`` writes the rows.

A benchmark, never CI: it needs libtpu (``pip install -e '.[tpu]'``, best in a
virtual environment of its own) and compiles each program for TPU (seconds each).
Run: ``python -m bench.platforms [--topology v5e:4x4] [--json out.json] [names...]``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import pathlib
import re
import sys
import tempfile
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import AxisType, Mesh
from jax.sharding import PartitionSpec as P

from shardc.compiler import jit

KINDS = ("all-gather", "all-reduce", "reduce-scatter", "all-to-all", "collective-permute")
REDUCTIONS = ("all-reduce", "reduce-scatter")
MEMORY = ("argument", "output", "temp", "net")
BF16 = jnp.bfloat16


@dataclasses.dataclass(frozen=True)
class Program:
    """A function, its abstract arguments and their shardings on a ("data", "model") mesh."""

    name: str
    fun: Callable
    args: tuple
    in_specs: tuple
    out_specs: object = None
    donate_argnums: tuple[int, ...] = ()


def _loss_mlp(params, x, y):
    h = x
    for w1, w2 in params:
        h = h + jax.nn.gelu(h @ w1) @ w2
    return jnp.mean((h.astype(jnp.float32) - y.astype(jnp.float32)) ** 2)


def _sgd(loss):
    def step(params, *batch):
        grads = jax.grad(loss)(params, *batch)
        return jax.tree.map(lambda p, g: (p - 0.01 * g).astype(p.dtype), params, grads)
    return step


def _attention_block(params, x, y):
    wq, wk, wv, wo, w1, w2 = params
    b, s, d = x.shape
    heads = 8

    def split(t):
        return t.reshape(b, s, heads, d // heads)
    q, k, v = split(x @ wq), split(x @ wk), split(x @ wv)
    scores = jnp.einsum("bqhd,bkhd->bhqk", q, k).astype(jnp.float32) / np.sqrt(d // heads)
    attn = jax.nn.softmax(scores, axis=-1).astype(x.dtype)
    h = x + jnp.einsum("bhqk,bkhd->bqhd", attn, v).reshape(b, s, d) @ wo
    h = h + jax.nn.gelu(h @ w1) @ w2
    return jnp.mean((h.astype(jnp.float32) - y.astype(jnp.float32)) ** 2)


def _shape(*dims, dtype=BF16):
    return jax.ShapeDtypeStruct(dims, dtype)


def programs() -> list[Program]:
    """Small train steps: MLP and transformer block, FSDP ("data") x TP ("model")."""
    d, f, batch = 512, 2048, 64
    mlp = tuple((_shape(d, f), _shape(f, d)) for _ in range(2))
    mlp_specs = tuple((P("data", "model"), P("model", "data")) for _ in range(2))
    block = (_shape(d, d), _shape(d, d), _shape(d, d), _shape(d, d), _shape(d, f),
             _shape(f, d))
    block_specs = (P("data", "model"), P("data", "model"), P("data", "model"),
                   P("model", "data"), P("data", "model"), P("model", "data"))
    return [
        Program("mlp_fsdp_tp_bf16", _sgd(_loss_mlp),
                (mlp, _shape(batch, d), _shape(batch, d)),
                (mlp_specs, P("data"), P("data")), out_specs=mlp_specs, donate_argnums=(0,)),
        Program("mlp_fsdp_tp_f32", _sgd(_loss_mlp),
                (jax.tree.map(lambda s: _shape(*s.shape, dtype=jnp.float32), mlp),
                 _shape(batch, d, dtype=jnp.float32), _shape(batch, d, dtype=jnp.float32)),
                (mlp_specs, P("data"), P("data")), out_specs=mlp_specs, donate_argnums=(0,)),
        Program("transformer_fsdp_tp_bf16", _sgd(_attention_block),
                (block, _shape(16, 128, d), _shape(16, 128, d)),
                (block_specs, P("data"), P("data")), out_specs=block_specs,
                donate_argnums=(0,)),
        Program("mlp_data_parallel_bf16", _sgd(_loss_mlp),
                (mlp, _shape(batch, d), _shape(batch, d)),
                (None, P(("data", "model")), P(("data", "model"))), out_specs=None),
    ]


@dataclasses.dataclass(frozen=True)
class Row:
    """One program: per kind (count, bytes) for CPU's and TPU's predictions and XLA:TPU;
    per memory field TPU's estimate and XLA:TPU's bytes."""

    name: str
    cpu: dict[str, tuple[int, int]]
    tpu: dict[str, tuple[int, int]]
    xla: dict[str, tuple[int, int]]
    memory: dict[str, int]
    xla_memory: dict[str, int]

    def ratio(self, field: str) -> float | None:
        mine, theirs = self.memory[field], self.xla_memory[field]
        return mine / theirs if theirs else (1.0 if mine == 0 else None)


def topology_mesh(topology: str) -> Mesh:
    """A ("data", "model") mesh over the devices of a TPU topology (no TPU needed)."""
    from jax.experimental import topologies

    devices = topologies.get_topology_desc(
        platform="tpu", topology_name=topology, chip_config_name="default",
        chips_per_host_bounds=(2, 2, 1), num_slices=1).devices
    model = 4
    grid = np.array(devices, dtype=object).reshape(len(devices) // model, model)
    return Mesh(grid, ("data", "model"), axis_types=(AxisType.Auto,) * 2)


def memory_spaces(dump: str) -> dict[str, int]:
    """Bytes XLA:TPU's buffer assignment allocates per memory space ("default": HBM,
    "vmem": on-chip scratch), read from its memory-usage report in ``dump``."""
    found: dict[str, int] = {}
    for report in pathlib.Path(dump).glob("*memory-usage-report.txt"):
        for space, total in _SPACE_TOTAL.findall(report.read_text()):
            found[space] = found.get(space, 0) + int(total)
    return found


_SPACE_TOTAL = re.compile(r"Memory Space: (\S+).*\nTotal bytes: (\d+)")


def _totals(report) -> dict[str, tuple[int, int]]:
    return {k: (t.count, t.bytes_per_device) for k, t in report.totals().items() if k in KINDS}


def _memory(estimate) -> dict[str, int]:
    return {"argument": estimate.argument_bytes, "output": estimate.output_bytes,
            "temp": estimate.temp_bytes, "net": estimate.net_bytes}


def compare(program: Program, mesh: Mesh) -> Row:
    """Predict for CPU and TPU, compile for the topology, and compare."""
    lowered = jit(program.fun, in_shardings=program.in_specs, out_shardings=program.out_specs,
                  donate_argnums=program.donate_argnums, mesh=mesh).lower(*program.args)
    with tempfile.TemporaryDirectory() as dump:
        compiled = lowered.compile(compiler_options={"xla_dump_to": dump})
        spaces = memory_spaces(dump)
    stats = compiled.memory_analysis()
    xla_memory = {"argument": stats.argument_size_in_bytes, "output": stats.output_size_in_bytes}
    # A compile-only client's memory_analysis() reports no temporaries: they are what
    # the buffer assignment puts in HBM (the default memory space) besides arguments
    # and outputs (an aliased output shares its donated argument's buffer).
    xla_memory["temp"] = (spaces.get("default", 0) - stats.argument_size_in_bytes
                          - stats.output_size_in_bytes + stats.alias_size_in_bytes)
    xla_memory["net"] = sum(xla_memory.values()) - stats.alias_size_in_bytes
    xla_memory["vmem"] = spaces.get("vmem", 0)
    return Row(
        program.name,
        _totals(lowered.comm_report(platform="cpu")),
        _totals(lowered.comm_report(platform="tpu")),
        {k: (c.count, c.bytes_per_device) for k, c in compiled.collectives().items()},
        _memory(lowered.memory_estimate(platform="tpu")),
        xla_memory,
    )


def format_table(rows: list[Row]) -> str:
    """Per program: one line per collective kind present anywhere (count x bytes for
    the CPU prediction, the TPU prediction, XLA:TPU), then the memory fields."""
    lines = [f"{'program':<26} {'kind / field':<19} {'cpu predicted':>18} "
             f"{'tpu predicted':>18} {'XLA:TPU':>18} {'tpu/XLA':>7}"]
    for row in rows:
        for kind in KINDS:
            cells = [row.cpu.get(kind, (0, 0)), row.tpu.get(kind, (0, 0)),
                     row.xla.get(kind, (0, 0))]
            if not any(count for count, _ in cells):
                continue
            ratio = _ratio(cells[1][1], cells[2][1])
            lines.append(f"{row.name:<26} {kind:<19} "
                         + " ".join(f"{c:>3} x {b:>12}" for c, b in cells) + f" {ratio:>7}")
        # Which reductions XLA:TPU forms as reduce-scatters varies (fewer for bf16
        # partial sums); the bytes reduced in all are what the rules must get right.
        cells = [tuple(sum(side.get(k, (0, 0))[i] for k in REDUCTIONS) for i in (0, 1))
                 for side in (row.cpu, row.tpu, row.xla)]
        lines.append(f"{row.name:<26} {'all-reduce + r-s':<19} "
                     + " ".join(f"{c:>3} x {b:>12}" for c, b in cells)
                     + f" {_ratio(cells[1][1], cells[2][1]):>7}")
        for field in MEMORY:
            lines.append(f"{row.name:<26} {'memory ' + field:<19} {'':>18} "
                         f"{row.memory[field]:>18} {row.xla_memory[field]:>18} "
                         f"{_ratio(row.memory[field], row.xla_memory[field]):>7}")
        lines.append(f"{row.name:<26} {'vmem (on chip)':<19} {'':>18} {'':>18} "
                     f"{row.xla_memory['vmem']:>18}")
    return "\n".join(lines) + "\n"


def _ratio(mine: int, theirs: int) -> str:
    if not theirs:
        return "1.00" if not mine else "-"
    return f"{mine / theirs:.2f}"


def to_json(rows: list[Row]) -> str:
    """Rows as JSON."""
    return json.dumps([dataclasses.asdict(row) for row in rows], indent=1)


def main(argv: list[str] | None = None) -> int:
    """Command line: print the table, optionally write JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", help="programs (default all)")
    parser.add_argument("--topology", default="v5e:4x4", help="a TPU topology name")
    parser.add_argument("--json", help="write the rows as JSON to this file")
    args = parser.parse_args(argv)
    try:
        import libtpu  # noqa: F401
    except ImportError:
        sys.stderr.write("bench.platforms needs libtpu: pip install -e '.[tpu]'\n")
        return 2
    mesh = topology_mesh(args.topology)
    rows = [compare(p, mesh) for p in programs() if not args.names or p.name in args.names]
    sys.stdout.write(format_table(rows))
    if args.json:
        pathlib.Path(args.json).write_text(to_json(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
