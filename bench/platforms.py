"""Communication and memory predicted per platform against XLA:TPU's compiled figures.

shardc's predictions (``Lowered.comm_report(platform=...)``,
``Lowered.memory_estimate(platform=...)``) are validated against XLA:CPU on every
zoo program (``bench/comm_report.py``, ``bench/memory_estimate.py``). This bench
checks the ``"tpu"`` platform's rules against XLA:TPU itself, from a host without
TPUs: libtpu compiles ahead of time for a topology's devices
(``jax.experimental.topologies``, a v5e slice by default), and shardc compiles the
same lowering for them (``Compiled.collectives()``, ``memory_analysis()``). Per
program it prints, per collective kind, the count and bytes per device per step
predicted for CPU and for TPU, those of XLA:TPU's optimized module per step
(``step_collectives``) and its instructions, then per memory field the TPU
estimate against XLA:TPU's (temporaries: the HBM its buffer assignment allocates
besides arguments and outputs, since a compile-only client's ``memory_analysis()``
reports none; the on-chip VMEM scratch it uses is printed alongside);
``--json`` writes the rows.

A benchmark, never CI: it needs libtpu (``pip install -e '.[tpu]'``, best in a
virtual environment of its own) and compiles each program for TPU (seconds each).
Run: ``python -m bench.platforms [--topology v5e:4x4] [--json out.json] [names...]``.

``--llama 1b|7b --layers N [--variant unrolled|scan|remat]`` compares instead a
Llama-shaped train step (``bench.plan_speed``'s, at Llama-3.2-1B's or Llama-2-7B's
widths, N layers, bf16) on a ("data", "model") mesh of the topology's devices
(v5e:16x16 by default), and prints the seconds shardc's planning takes (lowering,
``comm_report``, ``memory_estimate``) next to XLA:TPU's compile. What a pod job
changes: ``--model M`` devices for tensor parallelism (16 by default; "data", FSDP,
has the rest; 1: pure FSDP), ``--per-shard B`` sequences of ``--seq S`` tokens per
data shard (1 of 2048), ``--kv-heads K`` key and value heads (grouped-query
attention; as many as the query heads by default). ``--cache DIR`` keeps each compile's figures and its optimized HLO under
``DIR/<program>_<topology>/`` and reads them back instead of compiling again.

``--zoo libzoo|zoo [names...]`` compares instead the programs of ``bench/libzoo``
(other libraries' programs) or ``bench/zoo`` at their small size on the devices of
``--topology`` (v5e:2x4 by default, 8 chips as their meshes have): each is built on
this host's devices as its users build it, lowered for TPU
(``trace(...).lower(lowering_platforms=("tpu",))``, through its library's own jit
where it has one) and compiled for the topology's devices, device ``i`` of its mesh
for the chip of id ``i`` (the partitioning does not depend on which chip is which).
A program that does not lower or compile for TPU (a host callback, a complex FFT
under custom partitioning) is listed with the reason; the summary counts it.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import json
import pathlib
import re
import sys
import tempfile
import time
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import AxisType, Mesh
from jax.sharding import PartitionSpec as P

from bench import e2e_measure, plan_speed
from shardc.compiler import jit
from shardc.compiler.effects import program_values
from shardc.compiler.function import unused_arguments
from shardc.dialects import jax_private
from shardc.dialects.xla_form import module_for_xla
from shardc.runtime.collectives import find_collectives, result_bytes, shape_bytes, summarize
from shardc.runtime.compiled import device_assignment
from shardc.runtime.result_shardings import is_open

KINDS = ("all-gather", "all-reduce", "reduce-scatter", "all-to-all", "collective-permute")
REDUCTIONS = ("all-reduce", "reduce-scatter")
MEMORY = ("argument", "output", "temp", "net")
PLANNING = ("lowering", "comm_report", "memory_estimate")
BF16 = jnp.bfloat16
# How close a prediction must be to XLA:TPU's figure: every collective kind's bytes per
# step, and net memory.
COMM_TOLERANCE = e2e_measure.COMM_TOLERANCE
MEMORY_TOLERANCE = 0.10


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


# Llama-3.2-1B's and Llama-2-7B's widths (multi-head attention unless ``kv_heads``
# asks for grouped-query attention: Llama-3.2-1B has 8 key and value heads).
LLAMA = {"1b": {"d": 2048, "heads": 32, "ffn": 8192, "vocab": 128256},
         "7b": {"d": 4096, "heads": 32, "ffn": 11008, "vocab": 32000}}


def llama_program(size: str, layers: int, variant: str, mesh: Mesh, *,
                  seq: int = 2048, per_shard: int = 1, kv_heads: int | None = None) -> Program:
    """``bench.plan_speed``'s train step at ``size``'s widths with ``layers`` layers
    (``variant``: unrolled, scan, remat), bf16, ``per_shard`` sequences of ``seq``
    tokens per data shard, the parameters donated; the arguments carry their
    shardings on ``mesh`` (its split of "data" and "model" is the caller's);
    ``kv_heads`` key and value heads (default: as many as the query heads)."""
    shape = dict(LLAMA[size])
    heads = shape.pop("heads")
    kv = shape["d"] // heads * kv_heads if kv_heads else None
    args = plan_speed.abstract_args(variant, mesh, layers, seq=seq, dtype=BF16, kv=kv,
                                    batch=per_shard * mesh.shape["data"], **shape)
    # The name tells the cache's compiles apart (the mesh's split is in its folder's).
    name = f"llama_{size}_{layers}l_{variant}"
    if (seq, per_shard) != (2048, 1):
        name += f"_{per_shard}x{seq}"
    if kv_heads:
        name += f"_kv{kv_heads}"
    return Program(name, plan_speed.make_step(variant, layers, heads, mesh), args,
                   in_specs=None, donate_argnums=(0,))


@dataclasses.dataclass(frozen=True)
class Row:
    """One program: per kind (count, bytes per step) for CPU's and TPU's predictions
    and XLA:TPU (``step_collectives``); per memory field TPU's estimate and XLA:TPU's
    bytes; XLA:TPU's collective instructions as ``Compiled.collectives()`` counts them."""

    name: str
    cpu: dict[str, tuple[int, int]]
    tpu: dict[str, tuple[int, int]]
    xla: dict[str, tuple[int, int]]
    memory: dict[str, int]
    xla_memory: dict[str, int]
    xla_instructions: dict[str, tuple[int, int]] = dataclasses.field(default_factory=dict)
    # Seconds: shardc's lowering, comm_report and memory_estimate; XLA:TPU's compile.
    seconds: dict[str, float] = dataclasses.field(default_factory=dict)

    def ratio(self, field: str) -> float | None:
        mine, theirs = self.memory[field], self.xla_memory[field]
        return mine / theirs if theirs else (1.0 if mine == 0 else None)


def topology_mesh(topology: str, model: int = 4) -> Mesh:
    """A ("data", "model") mesh over the devices of a TPU topology (no TPU needed),
    ``model`` devices to the tensor-parallel axis."""
    from jax.experimental import topologies

    devices = topologies.get_topology_desc(
        platform="tpu", topology_name=topology, chip_config_name="default",
        chips_per_host_bounds=(2, 2, 1), num_slices=1).devices
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


# XLA:TPU's optimized HLO: a computation's header, the computations an instruction
# calls (a loop's body counted per trip), a loop's trip count, a collective.
_COMPUTATION = re.compile(r"^(?:ENTRY )?(%[\w.\-]+) ")
_CALLS = re.compile(r"\b(calls|to_apply|body|condition|branch_computations)="
                    r"(\{[^}]*\}|%[\w.\-]+)")
_WHILE = re.compile(r"condition=(%[\w.\-]+), body=(%[\w.\-]+)")
_TRIPS = re.compile(r'known_trip_count":\{"n":"(\d+)"')
_BOUND = re.compile(r"constant\((\d+)\)")
_COLLECTIVE = re.compile(r"=\s*(\(.*?\)|\S+)\s+(" + "|".join(KINDS) + r")(-start)?\(([^)]*)\)")
_CHANNEL = re.compile(r"channel_id=(\d+)")
# The computations XLA:TPU's collective pipelining splits an asynchronous collective
# into (its start and the steps it overlaps with compute), each holding a copy.
_SPLIT_COPIES = ("%async_collective_fusion", "%fused_computation")


def step_collectives(hlo_text: str) -> dict[str, tuple[int, int]]:
    """Per kind, the collectives one step of XLA:TPU's optimized module runs and
    their bytes per device (``Compiled.collectives()`` counts instructions).

    Two things differ from the instructions: XLA:TPU splits an asynchronous
    collective into several fusions (its start, the steps it overlaps with
    compute, its end) that each hold a copy of it under the same channel id, one
    collective run once; and the loops it makes itself (a windowed einsum's) or
    keeps (a scan's) run their bodies once per trip (the trip count XLA records,
    else the bound their condition compares the counter with)."""
    bodies: dict[str, list[str]] = {}
    current = None
    for line in hlo_text.splitlines():
        header = _COMPUTATION.match(line)
        if header and line.rstrip().endswith("{"):
            current = bodies.setdefault(header.group(1), [])
        elif current is not None:
            current.append(line)
    callers: dict[str, list[tuple[str, int]]] = {}
    for name, lines in bodies.items():
        for line in lines:
            loop = _WHILE.search(line)
            trips = None
            if loop is not None:
                known = _TRIPS.search(line)
                bound = [int(b) for b in _BOUND.findall("\n".join(bodies.get(loop.group(1), ())))]
                trips = int(known.group(1)) if known else (max(bound) if bound else 1)
            for key, called in _CALLS.findall(line):
                for callee in re.findall(r"%[\w.\-]+", called):
                    callers.setdefault(callee, []).append(
                        (name, trips if key == "body" and trips else 1))
    runs: dict[str, int] = {}

    def runs_of(name: str) -> int:
        if name not in runs:
            runs[name] = 0  # a cycle (none in HLO) counts nothing
            runs[name] = sum(runs_of(c) * f for c, f in callers[name]) if name in callers \
                else 1
        return runs[name]

    seen: dict[tuple[str, str], tuple[int, int]] = {}  # (kind, channel) -> (runs, bytes)
    for name, lines in bodies.items():
        for line in lines:
            match = _COLLECTIVE.search(line)
            if match is None:
                continue
            kind = match.group(2)
            if kind == "all-reduce" and name.startswith("%all-reduce-scatter"):
                kind = "reduce-scatter"  # XLA:TPU's reduce-scatter: an all-reduce and a slice
            channel = _CHANNEL.search(line)
            # Only a split collective's copies share its channel id: other collectives
            # may too (the combined reduce-scatters' fusions of one step all hold
            # channel_id=1), each run by its own caller.
            split = name.startswith(_SPLIT_COPIES)
            key = (kind, channel.group(1) if channel and split else f"{name}:{line}")
            size = max(result_bytes(match.group(1), bool(match.group(3))), shape_bytes(match.group(4)))
            # A split collective's copies may sit in a loop its steps overlap with:
            # it runs as often as the least-run copy (its start).
            count = runs_of(name)
            if key not in seen or count < seen[key][0]:
                seen[key] = (count, size)
    totals: dict[str, tuple[int, int]] = {}
    for (kind, _), (count, size) in seen.items():
        c, b = totals.get(kind, (0, 0))
        totals[kind] = (c + count, b + count * size)
    return totals


def _totals(totals) -> dict[str, tuple[int, int]]:
    return {k: (t.count, t.bytes_per_device) for k, t in totals.items() if k in KINDS}


def _memory(estimate) -> dict[str, int]:
    return {"argument": estimate.argument_bytes, "output": estimate.output_bytes,
            "temp": estimate.temp_bytes, "net": estimate.net_bytes}


def xla_figures(lowered, cache: pathlib.Path | None = None,
                compile_with: Callable[[dict], object] | None = None) -> dict:
    """XLA:TPU's compiled figures of ``lowered``: collectives per kind (count, bytes),
    memory per field, the seconds the compile took. With ``cache`` (a folder) the
    figures, the optimized HLO and the buffer assignment's reports are kept there,
    and read back instead of compiling when present. ``compile_with(options)``
    compiles it (default: ``lowered.compile``)."""
    figures_file = cache / "xla.json" if cache is not None else None
    if figures_file is not None and figures_file.exists():
        figures = json.loads(figures_file.read_text())
        figures["step"] = step_collectives((cache / "compiled.hlo.txt").read_text())
        return figures
    with tempfile.TemporaryDirectory() as dump:
        start = time.perf_counter()
        options = {"xla_dump_to": dump}
        compiled = (compile_with(options) if compile_with is not None
                    else lowered.compile(compiler_options=options))
        seconds = time.perf_counter() - start
        spaces = memory_spaces(dump)
        if cache is not None:
            cache.mkdir(parents=True, exist_ok=True)
            for kept in pathlib.Path(dump).glob("*"):
                if kept.name.endswith(("memory-usage-report.txt", "buffer-assignment.txt",
                                       "after_optimizations.txt")):
                    (cache / kept.name).write_bytes(kept.read_bytes())
    stats = compiled.memory_analysis()
    memory = {"argument": stats.argument_size_in_bytes, "output": stats.output_size_in_bytes}
    # A compile-only client's memory_analysis() reports no temporaries: they are what
    # the buffer assignment puts in HBM (the default memory space) besides arguments
    # and outputs (an aliased output shares its donated argument's buffer).
    memory["temp"] = (spaces.get("default", 0) - stats.argument_size_in_bytes
                      - stats.output_size_in_bytes + stats.alias_size_in_bytes)
    memory["net"] = sum(memory.values()) - stats.alias_size_in_bytes
    memory["vmem"] = spaces.get("vmem", 0)
    text = compiled.as_text()
    figures = {"collectives": {k: (c.count, c.bytes_per_device)
                               for k, c in compiled.collectives().items()},
               "step": step_collectives(text), "memory": memory, "compile_s": seconds}
    if cache is not None:
        (cache / "compiled.hlo.txt").write_text(text)
        figures_file.write_text(json.dumps(figures, indent=1))
    return figures


def compare(program: Program, mesh: Mesh, cache: pathlib.Path | None = None) -> Row:
    """Predict for CPU and TPU, compile for the topology, and compare."""
    start = time.perf_counter()
    lowered = jit(program.fun, in_shardings=program.in_specs, out_shardings=program.out_specs,
                  donate_argnums=program.donate_argnums, mesh=mesh).lower(*program.args)
    lowering = time.perf_counter() - start
    predicted = _predicted(lowered, lowering)
    xla = xla_figures(lowered, cache / f"{program.name}_{_topology_name(mesh)}"
                      if cache is not None else None)
    return _row(program.name, predicted, xla)


def _predicted(lowered, lowering_seconds: float) -> tuple[dict, dict, dict, dict]:
    """CPU and TPU collectives per step, the TPU memory estimate, and the seconds of
    planning (``lowering_seconds``, then each report timed here)."""
    seconds = {"lowering": lowering_seconds}
    start = time.perf_counter()
    tpu = _totals(lowered.comm_report(platform="tpu").step_totals())
    seconds["comm_report"] = time.perf_counter() - start
    start = time.perf_counter()
    memory = _memory(lowered.memory_estimate(platform="tpu"))
    seconds["memory_estimate"] = time.perf_counter() - start
    cpu = _totals(lowered.comm_report(platform="cpu").step_totals())
    return cpu, tpu, memory, seconds


def _row(name: str, predicted: tuple[dict, dict, dict, dict], xla: dict) -> Row:
    """A row of ``_predicted``'s figures against XLA:TPU's (``xla_figures``)."""
    cpu, tpu, memory, seconds = predicted
    seconds = {**seconds, "compile": xla["compile_s"]}
    return Row(name, cpu, tpu, {k: tuple(v) for k, v in xla["step"].items()}, memory,
               xla["memory"], {k: tuple(v) for k, v in xla["collectives"].items()}, seconds)


def topology_devices(topology: str) -> list:
    """The devices of a TPU topology (no TPU needed), in id order."""
    from jax.experimental import topologies

    devices = topologies.get_topology_desc(
        platform="tpu", topology_name=topology, chip_config_name="default",
        chips_per_host_bounds=(2, 2, 1), num_slices=1).devices
    return sorted(devices, key=lambda d: d.id)


class _Executable:
    """XLA's executable as ``xla_figures`` reads a compiled program."""

    def __init__(self, executable) -> None:
        self._executable = executable

    def memory_analysis(self):
        return self._executable.get_compiled_memory_stats()

    def as_text(self) -> str:
        return self._executable.hlo_modules()[0].to_string()

    def collectives(self) -> dict:
        return summarize(find_collectives(self.as_text()))


def _lower_for_tpu(program) -> object:
    """shardc's lowering of a zoo program for TPU, through its library's jit where it
    has one (``Program.jit``), on its own mesh's (this host's) devices."""

    class ForTpu:  # shardc's jit whose lower() lowers for TPU, for a library to wrap
        def __init__(self, jitted) -> None:
            self._jitted = jitted

        def __getattr__(self, name):
            return getattr(self._jitted, name)

        def __call__(self, *args, **kwargs):
            return self._jitted(*args, **kwargs)

        def lower(self, *args, **kwargs):
            return self._jitted.trace(*args, **kwargs).lower(lowering_platforms=("tpu",))

    if program.jit is not None:
        wrapped = program.jit(lambda *a, **k: ForTpu(jit(*a, **k)), e2e_measure.fresh(program.fun))
        return e2e_measure.stage(wrapped.lower(*program.args))
    jitted, args, _ = e2e_measure.prepare(program, "shardc")
    return jitted.trace(*args).lower(lowering_platforms=("tpu",))


def _compile_on(lowered, devices: dict) -> Callable[[dict], _Executable]:
    """Compile ``lowered``'s module (as ``Lowered.compile`` hands it to XLA) for the
    topology's devices (``devices``: by id), its mesh's device ``i`` the chip of id ``i``."""
    def compile_with(options: dict) -> _Executable:
        inputs, outputs = program_values(lowered._effects, lowered._args, lowered._results,
                                         lowered._closed_refs)
        module = lowered.module
        dropped = lowered._unused_arguments(module)
        if dropped:
            module = unused_arguments.without(module, dropped)
            inputs = [info for i, info in enumerate(inputs) if i not in set(dropped)]
        order = tuple(devices[d.id] for d in device_assignment(
            lowered._meshes, lowered.requested_devices))
        tokens = lowered._effects.tokens
        return _Executable(jax_private.compile_executable(
            module_for_xla(module), order,
            propagate_to_parameters=[False] * tokens + [is_open(i.sharding) for i in inputs],
            propagate_to_outputs=[False] * tokens + [is_open(o.sharding) for o in outputs],
            host_callbacks=list(lowered._host_callbacks),
            compiler_options=tuple(options.items())))
    return compile_with


def compare_zoo(program, devices: dict, cache: pathlib.Path | None = None) -> Row:
    """Predict a zoo program for CPU and TPU from its TPU lowering, compile it for the
    topology's ``devices`` (by id), and compare."""
    with e2e_measure.mesh_context(program):
        start = time.perf_counter()
        lowered = _lower_for_tpu(program)
        predicted = _predicted(lowered, time.perf_counter() - start)
        xla = xla_figures(lowered, cache / f"{program.name}_{len(devices)}dev"
                          if cache is not None else None, _compile_on(lowered, devices))
    return _row(program.name, predicted, xla)


def zoo_rows(which: str, names: list[str], topology: str,
             cache: pathlib.Path | None = None) -> tuple[list[Row], dict[str, str]]:
    """``compare_zoo`` of each program of ``bench/libzoo`` or ``bench/zoo`` named (all
    but the optional ones when none is), one at a time; and why each program that
    did not lower or compile for TPU did not."""
    zoo = importlib.import_module(f"bench.{which}")
    names = names or [n for n in zoo.REGISTRY if n not in getattr(zoo, "OPTIONAL", {})]
    devices = {d.id: d for d in topology_devices(topology)}
    rows, skipped = [], {}
    for name in names:
        try:
            [program] = zoo.make_programs("small", [name])
            rows.append(compare_zoo(program, devices, cache))
        except Exception as error:  # noqa: BLE001 - a program XLA:TPU does not take
            skipped[name] = f"{type(error).__name__}: {str(error).splitlines()[0][:200]}"
        sys.stderr.write(f"{name}: {skipped.get(name, 'compared')}\n")
    return rows, skipped


def summary(rows: list[Row], skipped: dict[str, str]) -> str:
    """One line per row (bytes per step predicted / XLA:TPU per kind, net memory) and
    how many rows have every kind within 5% and net memory within 10%."""
    lines = [f"{'program':<28} " + " ".join(f"{k:>24}" for k in KINDS) + f" {'net memory':>12}"]
    comm_ok = memory_ok = 0
    for row in rows:
        cells, within = [], True
        for kind in KINDS:
            mine, theirs = row.tpu.get(kind, (0, 0))[1], row.xla.get(kind, (0, 0))[1]
            within &= abs(mine - theirs) <= COMM_TOLERANCE * theirs
            cells.append("-" if not (mine or theirs) else f"{mine}/{theirs}")
        ratio = row.ratio("net")
        comm_ok += within
        memory_ok += ratio is not None and abs(ratio - 1) <= MEMORY_TOLERANCE
        lines.append(f"{row.name:<28} " + " ".join(f"{c:>24}" for c in cells)
                     + f" {_ratio(row.memory['net'], row.xla_memory['net']):>12}")
    for name, why in skipped.items():
        lines.append(f"{name:<28} not compiled for TPU: {why}")
    total = len(rows) + len(skipped)
    lines.append(f"every kind within 5%: {comm_ok} of {total}; net memory within 10%: "
                 f"{memory_ok} of {total}; not compiled for TPU: {len(skipped)}")
    return "\n".join(lines) + "\n"


def _topology_name(mesh: Mesh) -> str:
    return f"{mesh.devices.size}dev_" + "x".join(str(n) for n in mesh.devices.shape)


def format_table(rows: list[Row]) -> str:
    """Per program: one line per collective kind present anywhere (count x bytes per
    step for the CPU prediction, the TPU prediction, XLA:TPU, and XLA:TPU's
    instructions), then the memory fields and the seconds."""
    lines = [f"{'program':<26} {'kind / field':<19} {'cpu predicted':>18} "
             f"{'tpu predicted':>18} {'XLA:TPU':>18} {'tpu/XLA':>7} "
             f"{'XLA:TPU instructions':>21}"]
    for row in rows:
        for kind in KINDS:
            cells = [row.cpu.get(kind, (0, 0)), row.tpu.get(kind, (0, 0)),
                     row.xla.get(kind, (0, 0))]
            if not any(count for count, _ in cells):
                continue
            ratio = _ratio(cells[1][1], cells[2][1])
            count, size = row.xla_instructions.get(kind, (0, 0))
            lines.append(f"{row.name:<26} {kind:<19} "
                         + " ".join(f"{c:>3} x {b:>12}" for c, b in cells)
                         + f" {ratio:>7} {count:>4} x {size:>14}")
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
        if row.seconds:
            planning = sum(row.seconds[k] for k in PLANNING)
            lines.append(f"{row.name:<26} {'seconds':<19} {'':>18} {planning:>18.1f} "
                         f"{row.seconds['compile']:>18.1f}   (planning: "
                         + ", ".join(f"{k} {row.seconds[k]:.1f}" for k in PLANNING) + ")")
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
    parser.add_argument("--topology", help="a TPU topology name (default v5e:4x4; "
                        "v5e:16x16 with --llama)")
    parser.add_argument("--llama", choices=sorted(LLAMA),
                        help="compare a Llama-shaped train step of this size instead")
    parser.add_argument("--layers", type=int, default=2, help="the Llama step's layers")
    parser.add_argument("--variant", choices=plan_speed.VARIANTS, nargs="*",
                        default=["unrolled"], help="the Llama step's layers as written")
    parser.add_argument("--model", type=int, default=plan_speed.TP,
                        help="the Llama step's devices on the tensor-parallel axis "
                        "(\"data\", FSDP, has the rest; 1: pure FSDP)")
    parser.add_argument("--seq", type=int, default=2048, help="the Llama step's sequence")
    parser.add_argument("--per-shard", type=int, default=1,
                        help="the Llama step's sequences per data shard")
    parser.add_argument("--kv-heads", type=int,
                        help="the Llama step's key and value heads (grouped-query attention)")
    parser.add_argument("--zoo", choices=("libzoo", "zoo"),
                        help="compare the programs of bench/libzoo or bench/zoo instead")
    parser.add_argument("--cache", help="keep (and reuse) each compile's figures and HLO here")
    parser.add_argument("--json", help="write the rows as JSON to this file")
    args = parser.parse_args(argv)
    try:
        import libtpu  # noqa: F401
    except ImportError:
        sys.stderr.write("bench.platforms needs libtpu: pip install -e '.[tpu]'\n")
        return 2
    cache = pathlib.Path(args.cache) if args.cache else None
    if args.zoo:
        rows, skipped = zoo_rows(args.zoo, args.names, args.topology or "v5e:2x4", cache)
        sys.stdout.write(format_table(rows) + summary(rows, skipped))
        if args.json:
            pathlib.Path(args.json).write_text(to_json(rows))
        return 0
    if args.llama:
        mesh = topology_mesh(args.topology or "v5e:16x16", model=args.model)
        selected = [llama_program(args.llama, args.layers, v, mesh, seq=args.seq,
                                  per_shard=args.per_shard, kv_heads=args.kv_heads)
                    for v in args.variant]
    else:
        mesh = topology_mesh(args.topology or "v5e:4x4")
        selected = [p for p in programs() if not args.names or p.name in args.names]
    rows = [compare(p, mesh, cache) for p in selected]
    sys.stdout.write(format_table(rows))
    if args.json:
        pathlib.Path(args.json).write_text(to_json(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
