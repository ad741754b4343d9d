"""How long one step of a sharded program takes on a device kind, before compiling.

``step_time(module, platform)`` reads a propagated module (``Lowered.step_time``
propagates a copy, as ``comm_report`` does) and models one device's step
(``docs/step-time-model.md``):

* compute: the device's operations per step (``cost.flops``: XLA's cost
  analysis rules on the shard shapes, loop bodies once per iteration, the
  all-reduces' additions included), dots and convolutions at the hardware's
  peak matrix rate for their element type, the rest at its vector rate;
* communication: every collective ``comm_report`` predicts (bytes per device,
  per iteration in loops), each one the latency of a collective plus the bytes
  a ring algorithm moves per device (all-reduce 2(n-1)/n of its buffer,
  all-gather, reduce-scatter and all-to-all (n-1)/n, collective-permute all of
  it, n the devices of its mesh axes) over the bandwidth of those axes: the
  fast interconnect while the axes' devices fit in one fast group, the slower
  network past it;
* the step: compute plus communication (nothing overlapped, an upper bound;
  ``overlapped_s`` is the lower bound, the larger of the two).

The figures of each device kind are ``platforms.HARDWARE``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from math import prod

from jaxlib.mlir import ir

from shardc.compiler.cost.flops import Flops, module_flops
from shardc.compiler.cost.platforms import Hardware, hardware, predicting_for
from shardc.compiler.cost.report import CommEntry, comm_report_of
from shardc.compiler.cost.reshard import (
    ALL_GATHER,
    ALL_REDUCE,
    ALL_TO_ALL,
    REDUCE_SCATTER,
    collective_element_bytes,
)
from shardc.compiler.propagation.values import ModuleValues

# Per kind, the share of its counted bytes a ring algorithm moves per device
# over n devices (a collective-permute moves its buffer once).
_RING = {
    ALL_REDUCE: lambda n: 2 * (n - 1) / n,
    ALL_GATHER: lambda n: (n - 1) / n,
    REDUCE_SCATTER: lambda n: (n - 1) / n,
    ALL_TO_ALL: lambda n: (n - 1) / n,
}
_ELEMENT = re.compile(r"tensor<(?:[\d?]+x)*([a-z]+\d*)")
_ELEMENT_BYTES = {"f64": 8, "i64": 8, "ui64": 8, "complex<f32>": 8, "f32": 4, "i32": 4,
                  "ui32": 4, "bf16": 2, "f16": 2, "i16": 2, "ui16": 2}


@dataclass(frozen=True)
class CommTime:
    """The collectives of one kind over one set of mesh axes, per step."""

    kind: str
    axes: tuple[str, ...]
    count: int  # collectives run per step (those XLA combines into another: none)
    bytes_per_device: int  # as ``comm_report`` counts them, per step
    seconds: float


@dataclass(frozen=True)
class StepTime:
    """One device's modelled step: its operations, collectives and seconds."""

    platform: str  # the device kind (``platforms.HARDWARE``)
    flops: float  # per device per step
    flops_once: float  # loop bodies once: what ``Compiled.cost_analysis()["flops"]`` counts
    matmul_flops: Mapping[str, float]  # of ``flops``, in dots and convolutions, by type
    compute_s: float
    comm: tuple[CommTime, ...]
    comm_s: float
    notes: tuple[str, ...] = field(default=())

    @property
    def total_s(self) -> float:
        """Compute, then communication: nothing overlapped."""
        return self.compute_s + self.comm_s

    @property
    def overlapped_s(self) -> float:
        """Communication hidden behind compute (or the reverse): the larger of the two."""
        return max(self.compute_s, self.comm_s)

    @property
    def bytes(self) -> int:
        """Collective bytes per device per step."""
        return sum(c.bytes_per_device for c in self.comm)

    def comm_by_kind(self) -> dict[str, float]:
        """Seconds of communication per collective kind."""
        return _summed(self.comm, lambda c: c.kind)

    def comm_by_axes(self) -> dict[str, float]:
        """Seconds of communication per set of mesh axes (``"x,y"``; ``""``: a
        collective written in a manual computation, over its own axes)."""
        return _summed(self.comm, lambda c: ",".join(c.axes))

    def format_text(self) -> str:
        """A short human-readable account of the step."""
        lines = [f"step time on {self.platform}: {human_seconds(self.total_s)} "
                 f"(compute {human_seconds(self.compute_s)}, "
                 f"communication {human_seconds(self.comm_s)}; "
                 f"overlapped {human_seconds(self.overlapped_s)})",
                 f"  {self.flops:.4g} operations per device ({self.flops_once:.4g} with loop "
                 f"bodies once), {self.bytes} collective bytes per device"]
        for c in self.comm:
            lines.append(f"  {c.kind:<19} over {','.join(c.axes) or '(manual)':<12} "
                         f"x{c.count:<5} {c.bytes_per_device:>12} B  {human_seconds(c.seconds)}")
        lines += [f"note: {note}" for note in self.notes]
        return "\n".join(lines) + "\n"

    def as_dict(self) -> dict:
        """JSON-ready fields, with ``total_s``, ``overlapped_s`` and ``bytes``."""
        data = asdict(self)
        data.update(total_s=self.total_s, overlapped_s=self.overlapped_s, bytes=self.bytes)
        return data

    def to_json(self) -> str:
        return json.dumps(self.as_dict(), indent=1)


def step_time(module: ir.Module | ir.Operation, platform: str | None = None) -> StepTime:
    """Model one step of ``module`` on ``platform`` (``platforms.hardware``: "cpu",
    "tpu" (v5e) or "gpu" (H100); default "cpu"). ``module``'s values carry their
    shardings already: a propagated module (``Lowered.step_time`` propagates a
    copy of its own)."""
    module = module.operation
    platform = platform or "cpu"
    device = hardware(platform)
    with predicting_for(device.rules):
        reader = ModuleValues(module, missing_as_replicated=True)
        flops = module_flops(reader)  # before the report: it uses the reader up
        report = comm_report_of(reader)
    return step_time_from(flops, report.entries, axis_sizes(reader), device, report.notes)


def step_time_from(flops: Flops, entries: tuple[CommEntry, ...] | list[CommEntry],
                   sizes: Mapping[str, int], device: Hardware,
                   notes: tuple[str, ...] = ()) -> StepTime:
    """The step of a program whose operations are ``flops`` and whose collectives,
    as the platform compiles them, are ``entries`` (``comm_report_of``'s), on a mesh
    of axis ``sizes``: ``step_time``'s model, for a caller that found them itself
    (AUTO's search, which keeps them per op across the states it prices)."""
    reduced = sum(_all_reduce_elements(e) * (e.runs or 1) for e in entries
                  if e.kind == ALL_REDUCE)
    reduced_once = sum(_all_reduce_elements(e) for e in entries if e.kind == ALL_REDUCE)
    per_step = flops.per_step + reduced
    matmul = sum(flops.matmul.values())
    compute = sum(n / device.matmul_rate(dtype) for dtype, n in flops.matmul.items()) \
        + max(per_step - matmul, 0.0) / device.vector_flops
    comm = _comm_times(entries, sizes, device)
    notes = list(notes)
    if device.rules.name not in ("cpu", "tpu"):
        notes.append(f"{device.name}: XLA's collectives on it are predicted with rules not "
                     "validated against its compiled HLO")
    return StepTime(device.name, per_step, flops.once + reduced_once, dict(flops.matmul),
                    compute, comm, sum(c.seconds for c in comm), tuple(notes))


def collective_seconds(kind: str, bytes_per_device: int, axes: tuple[str, ...],
                       sizes: Mapping[str, int], device: Hardware) -> float:
    """Seconds of one collective of ``kind`` moving ``bytes_per_device`` (as
    ``comm_report`` counts them) over mesh ``axes`` (``sizes``: every mesh axis in
    mesh order, major first), latency included."""
    named = [a for a in axes if a in sizes]
    n = prod(sizes[a] for a in named) if named else None
    share = _RING[kind](n) if kind in _RING and n else (2.0 if kind == ALL_REDUCE else 1.0)
    if kind in _RING and n == 1:
        share = 0.0
    return device.latency_s + share * bytes_per_device / _bandwidth(named, sizes, device)


def _bandwidth(axes: list[str], sizes: Mapping[str, int], device: Hardware) -> float:
    """The fast interconnect while the devices from the most major of ``axes`` to
    the mesh's minor end fit in one fast group (minor axes are nearest devices)."""
    order = list(sizes)
    if not axes:
        return device.link_bandwidth
    major = min(order.index(a) for a in axes)
    span = prod(sizes[a] for a in order[major:])
    return device.link_bandwidth if span <= device.fast_group else device.slow_bandwidth


def _comm_times(entries, sizes: Mapping[str, int], device: Hardware) -> tuple[CommTime, ...]:
    groups: dict[tuple[str, tuple[str, ...]], list[float]] = {}
    for entry in entries:
        runs = entry.runs if entry.runs is not None else 1
        seconds = collective_seconds(entry.kind, entry.bytes_per_device, entry.axes, sizes,
                                     device)
        if entry.combined:  # XLA runs it inside an earlier all-reduce: no latency of its own
            seconds -= device.latency_s
        group = groups.setdefault((entry.kind, entry.axes), [0, 0, 0.0])
        group[0] += 0 if entry.combined else runs
        group[1] += runs * entry.bytes_per_device
        group[2] += runs * seconds
    return tuple(CommTime(kind, axes, int(c), int(b), s)
                 for (kind, axes), (c, b, s) in groups.items())


def axis_sizes(reader: ModuleValues) -> dict[str, int]:
    """The axes of the module's first mesh with axes, major first."""
    for mesh in reader.meshes.values():
        if mesh.sizes:
            return dict(sorted(mesh.sizes.items(), key=lambda item: mesh.order[item[0]]))
    return {}


def _all_reduce_elements(entry: CommEntry) -> float:
    """Elements an all-reduce adds on one device (XLA counts one operation each)."""
    match = _ELEMENT.search(entry.tensor)
    dtype = match.group(1) if match else "f32"
    own = _ELEMENT_BYTES.get(dtype, 4)
    return entry.bytes_per_device / collective_element_bytes(own, dtype)


def _summed(comm, key) -> dict[str, float]:
    out: dict[str, float] = {}
    for c in comm:
        out[key(c)] = out.get(key(c), 0.0) + c.seconds
    return out


def human_seconds(seconds: float) -> str:
    """``0.0123`` -> ``12.3 ms``."""
    if seconds >= 1:
        return f"{seconds:.2f} s"
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.1f} ms"
    return f"{seconds * 1e6:.0f} µs"


__all__ = ["CommTime", "StepTime", "collective_seconds", "human_seconds", "step_time",
           "step_time_from"]
