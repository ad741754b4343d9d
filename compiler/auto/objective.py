"""The objective AUTO shardings minimise: a propagated program's modelled step time.

``step_time(reader, device)`` models one execution of a propagated module on
one device of the mesh as three terms, summed (no overlap assumed):

* **compute**: the floating-point work of every ``dot_general`` and
  ``convolution`` as the device runs it (the op's global flops divided by the
  devices its result dimensions are split over, and by the devices a
  contraction is split over where both operands carry the same axes there:
  partial sums) over the device's peak flops;
* **memory traffic**: the shard bytes every other op writes, over the device's
  memory bandwidth (elementwise work scales with the shard, as XLA fuses it);
* **communication**: every collective ``comm_report`` predicts (bytes per
  device, times it runs per step), each timed as ``cost.step_time`` times it
  (``collective_seconds``: a ring's share of its bytes over its mesh axes'
  bandwidth, plus a latency).

The device's figures are ``platforms.HARDWARE``'s, the table the step-time
model that judges AUTO's choices (``Lowered.step_time``) reads too.

The memory peak (``cost_aware.pricing.memory_peak``: every value live from its
definition to its last use, at its shard bytes) decides feasibility under a
budget; it is not part of the time. This is the one function the search calls:
a finer step-time model replaces ``step_time`` alone.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator
from dataclasses import dataclass, field

from shardc.compiler.cost.platforms import Hardware
from shardc.compiler.cost.report import collectives_at
from shardc.compiler.cost.reshard import dim_axes, shard_bytes
from shardc.compiler.cost.step_time import axis_sizes, collective_seconds
from shardc.compiler.cost.trips import runs_per_step
from shardc.compiler.cost_aware.pricing import memory_peak
from shardc.compiler.propagation.values import ModuleValues
from shardc.compiler.sharding.rules import INDEXED_ROLES


@dataclass(frozen=True)
class StepTime:
    """One propagated candidate, as the objective sees it (seconds, bytes per device)."""

    compute_s: float
    memory_s: float
    comm_s: float
    collectives: int
    comm_bytes: int
    memory_peak: int
    bytes_by_axes: dict[tuple[str, ...], int] = field(default_factory=dict, compare=False)

    @property
    def seconds(self) -> float:
        return self.compute_s + self.memory_s + self.comm_s

    def format_text(self) -> str:
        return (f"{self.seconds * 1e3:.4f} ms (compute {self.compute_s * 1e3:.4f}, memory "
                f"{self.memory_s * 1e3:.4f}, {self.collectives} collectives "
                f"{self.comm_bytes} B {self.comm_s * 1e3:.4f}), peak {self.memory_peak} B")


def step_time(reader: ModuleValues, device: Hardware, memo: dict | None = None) -> StepTime:
    """The modelled step time of ``reader``'s propagated module on ``device`` (see
    the module doc; the figures are ``platforms.HARDWARE``'s, each collective timed
    as ``cost.step_time`` times it).

    ``memo``: kept by the caller across the propagated copies of one module (with
    ``reader.costs``, whose interned sharding ids it keys each op's work by)."""
    sizes = axis_sizes(reader)
    memo = memo if reader.costs is not None else None
    compute, traffic = _work(reader, memo.setdefault("work", {}) if memo is not None else None)
    comm_s, count, total, by_axes = 0.0, 0, 0, {}
    collectives = memo.setdefault("collectives", {}) if memo is not None else None
    for kind, axes, size, runs in _collectives(reader, collectives):
        devices = math.prod(sizes.get(a, 1) for a in axes) or 1
        if devices <= 1 or size == 0:
            continue
        runs = runs if runs is not None else 1
        comm_s += runs * collective_seconds(kind, size, axes, sizes, device)
        count += runs
        total += size * runs
        by_axes[axes] = by_axes.get(axes, 0) + size * runs
    return StepTime(compute / device.matmul_rate("f32"), traffic / device.memory_bandwidth,
                    comm_s, count, total, memory_peak(reader), by_axes)


def _collectives(reader: ModuleValues, memo: dict | None
                 ) -> Iterator[tuple[str, tuple[str, ...], int, int | None]]:
    """``(kind, axes, bytes per device, runs per step)`` of every collective
    ``comm_report`` predicts, in program order (XLA's combining of all-reduces aside).

    ``memo`` keeps an op's collectives by its ``op_key`` (rule, types, interned
    shardings) where the cost model found them without resharding an operand for it
    (so without asking which values earlier ops resharded): most ops of most states.
    """
    graph = reader.graph
    trips: dict[int, int | None] = {}
    found = reader.costs.found if memo is not None else None
    for op in range(len(graph.ops)):
        key = None
        if found is not None and graph.op_results[op] and graph.op_name[op] not in _UNKEYED:
            key = reader.op_key(op)
            known = memo.get(key) if key is not None else None
            if known is not None:
                if known:
                    runs = runs_per_step(graph, op, trips)
                    yield from ((kind, axes, size, runs) for kind, axes, size in known)
                continue
        entries = [(c.kind, c.axes, c.bytes_per_device) for c in collectives_at(reader, op)]
        if entries:
            runs = runs_per_step(graph, op, trips)
            yield from ((kind, axes, size, runs) for kind, axes, size in entries)
        if key is not None:
            needs = found.get(key)
            if needs is not None and all(need.target is None for need in needs[0]):
                memo[key] = entries


# Ops whose attributes decide more than their op key says (the cost model keys none).
_UNKEYED = frozenset({"stablehlo.reduce_window", *INDEXED_ROLES})


def _work(reader: ModuleValues, memo: dict | None) -> tuple[float, int]:
    """Per-device flops of the dots and convolutions, and shard bytes the other ops write.

    ``memo`` keeps each op's share by its operands' and result's interned shardings,
    which decide it."""
    graph = reader.graph
    flops, traffic = 0.0, 0
    facts = reader.facts
    contracting = facts.setdefault("auto contracting", {})
    counted = facts.get("auto counted ops")
    if counted is None:
        counted = facts["auto counted ops"] = [
            (op, name in _DOTS) for op, name in enumerate(graph.op_name)
            if graph.op_results[op] and name not in _FREE and not graph.erased[op]
            and graph.value_shape[graph.op_results[op][0]] is not None]
    sharding_id = reader.sharding_id if memo is not None else None
    for op, is_dot in counted:
        if memo is not None:
            values = (graph.op_results[op][0], *graph.op_operands[op][:2]) if is_dot else (
                graph.op_results[op][0],)
            key = (graph.value_type_key[values[0]], op if is_dot else -1,
                   *map(sharding_id, values))
            found = memo.get(key)
            if found is not None:
                if is_dot:
                    flops += found
                else:
                    traffic += found
                continue
        out = reader.tensor(graph.op_results[op][0])
        if is_dot:
            found = _op_flops(reader, op, graph.op_name[op], out, contracting)
            flops += found
        else:
            found = shard_bytes(out.shape, out.element_bytes,
                                dim_axes(out.sharding, len(out.shape)))
            traffic += found
        if memo is not None:
            memo[key] = found
    return flops, traffic


_DOTS = frozenset({"stablehlo.dot_general", "stablehlo.convolution"})
# Ops that move no data of their own once XLA has compiled them.
_FREE = frozenset({"func.func", "func.return", "stablehlo.constant", "stablehlo.reshape",
                   "stablehlo.broadcast_in_dim", "sdy.sharding_constraint", "sdy.reshard",
                   "stablehlo.optimization_barrier", "sdy.data_flow_edge"})


def _op_flops(reader: ModuleValues, op: int, name: str, out, contracting: dict) -> float:
    """2 x (result elements) x (contracted elements per result element), per device."""
    graph = reader.graph
    lhs = reader.tensor(graph.op_operands[op][0])
    rhs = reader.tensor(graph.op_operands[op][1])
    if lhs is None or rhs is None:
        return 0.0
    found = contracting.get(op)
    if found is None:
        found = contracting[op] = _contraction(str(graph.ops[op].attributes[
            "dot_dimension_numbers" if name == "stablehlo.dot_general" else "dimension_numbers"
        ]), name, lhs.shape, rhs.shape)
    per_element, lhs_dims, rhs_dims = found
    total = 2.0 * math.prod(out.shape) * per_element
    split = _devices(out.sharding, len(out.shape))
    # A contraction split the same way on both operands runs as partial sums.
    lhs_axes = dim_axes(lhs.sharding, len(lhs.shape))
    rhs_axes = dim_axes(rhs.sharding, len(rhs.shape))
    used = {a.name for axes in dim_axes(out.sharding, len(out.shape)) for a in axes}
    for dl, dr in zip(lhs_dims, rhs_dims):
        for axis in lhs_axes[dl]:
            if axis in rhs_axes[dr] and axis.name not in used:
                split *= axis.size
    return total / split


def _devices(sharding, rank: int) -> int:
    return math.prod(a.size for axes in dim_axes(sharding, rank) for a in axes) or 1


_DOT_CONTRACTING = re.compile(r"(lhs|rhs)_contracting_dimensions = \[([0-9, ]*)\]")
_CONV_LAYOUT = re.compile(r"\[([^\]]*)\]x\[([^\]]*)\]->")


def _contraction(numbers: str, name: str, lhs_shape, rhs_shape
                 ) -> tuple[int, tuple[int, ...], tuple[int, ...]]:
    """(elements contracted per result element, lhs and rhs contracted dimensions)."""
    if name == "stablehlo.dot_general":
        found = dict(_DOT_CONTRACTING.findall(numbers))
        lhs = tuple(int(x) for x in found.get("lhs", "").split(",") if x.strip())
        rhs = tuple(int(x) for x in found.get("rhs", "").split(",") if x.strip())
        return math.prod(lhs_shape[d] for d in lhs), lhs, rhs
    layout = _CONV_LAYOUT.search(numbers)
    if layout is None:
        return 1, (), ()
    inputs = [t.strip() for t in layout.group(1).split(",")]
    kernel = [t.strip() for t in layout.group(2).split(",")]
    # Every kernel element but its output features meets each result element.
    per_element = math.prod(rhs_shape) // max(1, rhs_shape[kernel.index("o")])
    return per_element, (inputs.index("f"),), (kernel.index("i"),)
