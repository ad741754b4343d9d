"""The objective AUTO shardings minimise: a propagated program's modelled step time.

``step_time(reader, device)`` models one execution of a propagated module on
one device of the mesh as ``Lowered.step_time`` (``cost.step_time``) does, the
model AUTO's choices are judged by:

* **compute**: the device's operations (``cost.flops.module_flops``: XLA's cost
  analysis rules on the shard shapes, loop bodies once per trip), dots and
  convolutions at the device's matrix rate for their element type, the rest at
  its vector rate;
* **communication**: every collective ``comm_report`` predicts (bytes per
  device, times it runs per step) as the platform compiles them
  (``report.as_compiled``: all-reduces reassociated and combined, loop
  all-gathers windowed), each timed as ``cost.step_time`` times it (a ring's
  share of its bytes over its mesh axes' bandwidth, plus a latency).

Both parts are ``cost.step_time.step_time_from``'s: one model with
``Lowered.step_time``, so a state's price is the step time of the program AUTO
returns for it; only the finding of each op's collectives is kept per op
across states here.

The device's figures are ``platforms.HARDWARE``'s.

The **memory** of a state decides feasibility under a budget; it is not part of
the time. ``memory_bytes`` is ``Lowered.memory_estimate``'s model
(``explain.memory.estimate_memory_of``: arguments + outputs + the heap of
temporaries - aliased, per device, what XLA's ``memory_analysis`` adds up),
what a budget is judged by; ``step_time`` carries the quick live-range peak
(``cost_aware.pricing.memory_peak``), what the search ranks states of equal
time by where no budget is set, until it asks for ``memory_bytes``.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field, replace

from shardc.compiler.cost.flops import module_flops
from shardc.compiler.cost.platforms import PLATFORMS, Hardware
from shardc.compiler.cost.report import (
    CommEntry,
    as_compiled,
    collectives_at,
    entries_key,
    explicit_entries,
)
from shardc.compiler.cost.step_time import axis_sizes, step_time_from
from shardc.compiler.cost.trips import runs_per_step
from shardc.compiler.cost_aware.pricing import memory_peak
from shardc.compiler.explain.memory import estimate_memory_of
from shardc.compiler.propagation.values import ModuleValues
from shardc.compiler.sharding.rules import INDEXED_ROLES


@dataclass(frozen=True)
class StepTime:
    """One propagated candidate, as the objective sees it (seconds, bytes per device).

    ``memory_peak``: the state's memory per device, as the search judged it (the
    memory model's ``net_bytes`` under a budget, the quick live-range peak without);
    ``estimated`` says which."""

    compute_s: float
    comm_s: float
    flops: float
    collectives: int
    comm_bytes: int
    memory_peak: int
    estimated: bool = False
    bytes_by_axes: dict[tuple[str, ...], int] = field(default_factory=dict, compare=False)

    @property
    def seconds(self) -> float:
        return self.compute_s + self.comm_s

    def format_text(self) -> str:
        memory = "memory" if self.estimated else "peak"
        return (f"{self.seconds * 1e3:.4f} ms (compute {self.compute_s * 1e3:.4f}, "
                f"{self.collectives} collectives {self.comm_bytes} B "
                f"{self.comm_s * 1e3:.4f}), {memory} {self.memory_peak} B")


def step_time(reader: ModuleValues, device: Hardware, memo: dict | None = None) -> StepTime:
    """The modelled step time of ``reader``'s propagated module on ``device`` (see
    the module doc), with the quick memory peak (``memory_bytes`` is the model a
    budget is judged by: the search asks for it where it decides). Run under
    ``predicting_for(device.rules)``: the collectives are the platform's.

    ``memo``: kept by the caller across the propagated copies of one module (with
    ``reader.costs``, whose interned sharding ids it keys each op's collectives by)."""
    memo = memo if reader.costs is not None else None
    # The flops and the peak read the shardings only; the collectives below note the
    # operands they reshard on the reader, so they come last.
    peak = memory_peak(reader)
    # Every op's key, read once for both (most ops are looked up by it).
    keys = reader.op_keys() if memo is not None else None
    flops = module_flops(reader, memo.setdefault("flops", {}) if memo is not None else None,
                         keys)
    collectives = memo.setdefault("collectives", {}) if memo is not None else None
    # XLA's reshard reuse is followed op by op within one pricing: each starts with
    # none made (a reader priced again must not reuse its earlier pricing's gathers).
    reader.resharded = {}
    sites = as_compiled(reader, list(_collectives(reader, collectives, keys)))
    step = step_time_from(flops, [entry for _, entry in sites], axis_sizes(reader), device)
    by_axes: dict[tuple[str, ...], int] = {}
    for c in step.comm:
        by_axes[c.axes] = by_axes.get(c.axes, 0) + c.bytes_per_device
    return StepTime(step.compute_s, step.comm_s, step.flops, sum(c.count for c in step.comm),
                    step.bytes, peak, bytes_by_axes=by_axes)


def memory_bytes(reader: ModuleValues, device: Hardware) -> int:
    """Per-device bytes of ``reader``'s propagated module by ``Lowered.memory_estimate``'s
    model (``explain.memory``): arguments + outputs + temporaries - aliased, what
    XLA's ``memory_analysis`` adds up."""
    return estimate_memory_of(reader, platform=_memory_platform(device)).net_bytes


def _memory_platform(device: Hardware) -> str:
    """The platform whose buffer layout the memory model follows for ``device``
    (XLA:GPU's is not modelled: CPU's, untiled)."""
    return device.rules.name if device.rules.name in PLATFORMS else "cpu"


def _collectives(reader: ModuleValues, memo: dict | None, keys: list[tuple | None] | None
                 ) -> Iterator[tuple[int, CommEntry]]:
    """``(op, entry)`` of every collective ``comm_report`` finds at an op, in program
    order, before the platform's rewrites (``report.as_compiled``).

    ``memo`` keeps an op's collectives by its ``op_key`` (rule, types, interned
    shardings) where the cost model found them without resharding an operand for it
    (so without asking which values earlier ops resharded): most ops of most states;
    a constant's and an explicit reshard's (an activation's mark) by ``entries_key``.
    """
    graph = reader.graph
    trips: dict[int, int | None] = {}
    found = reader.costs.found if memo is not None else None
    for op in range(len(graph.ops)):
        key = None
        if found is not None and graph.op_results[op] and graph.op_name[op] not in _UNKEYED:
            key = keys[op]
            if key is None:
                key = entries_key(reader, op)
            known = memo.get(key) if key is not None else None
            if known is not None:
                if known:
                    runs = runs_per_step(graph, op, trips)
                    yield from ((op, entry if runs == 1 else replace(entry, runs=runs))
                                for entry in known)
                continue
        entries = list(collectives_at(reader, op))
        if entries:
            runs = runs_per_step(graph, op, trips)
            yield from ((op, entry if runs == 1 else replace(entry, runs=runs))
                        for entry in entries)
        if key is not None:
            needs = found.get(key)
            if explicit_entries(graph, op) or (
                    needs is not None and all(need.target is None for need in needs[0])):
                memo[key] = entries


# Ops whose attributes decide more than their op key says (the cost model keys none).
_UNKEYED = frozenset({"stablehlo.reduce_window", *INDEXED_ROLES})
