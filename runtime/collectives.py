"""The collectives in a compiled (partitioned) HLO module: kind, count, bytes per device.

This is the communication figure benchmarks and tests compare: it is read
from the HLO XLA will actually run, after SPMD partitioning. For each
collective instruction, the bytes counted are those of its larger side on one
device (the gathered result of an all-gather, the full operand of a
reduce-scatter, the buffer of an all-reduce, all-to-all or collective-permute):
the data each device sends or receives, up to the algorithm's constant factor.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable

KINDS = ("all-gather", "all-reduce", "all-to-all", "collective-permute", "reduce-scatter")

_ELEMENT_BYTES = {
    "pred": 1, "s4": 1, "u4": 1, "s8": 1, "u8": 1, "f8e4m3fn": 1, "f8e5m2": 1,
    "s16": 2, "u16": 2, "f16": 2, "bf16": 2,
    "s32": 4, "u32": 4, "f32": 4,
    "s64": 8, "u64": 8, "f64": 8, "c64": 8,
    "c128": 16,
}  # fmt: skip

# `%name = <result shape> <kind>[-start](<operands>), attributes`
_INSTRUCTION = re.compile(
    r"=\s*(?P<result>\(.*?\)|\S+)\s+(?P<kind>" + "|".join(KINDS) + r")(?:-start)?\((?P<operands>[^)]*)\)"
)
_ARRAY_SHAPE = re.compile(r"\b([a-z]+\d*[a-z0-9]*)\[([\d,]*)\]")


@dataclasses.dataclass(frozen=True)
class Collective:
    """One collective instruction of the partitioned module."""

    kind: str
    bytes_per_device: int
    line: str


@dataclasses.dataclass(frozen=True)
class CollectiveSummary:
    """All collectives of one kind: how many and their bytes per device in total."""

    kind: str
    count: int
    bytes_per_device: int


def shape_bytes(text: str) -> int:
    """Bytes of every array shape written in ``text`` (``f32[4,2]{1,0}``, tuples too)."""
    total = 0
    for dtype, dims in _ARRAY_SHAPE.findall(text):
        if dtype not in _ELEMENT_BYTES:
            continue
        count = 1
        for dim in filter(None, dims.split(",")):
            count *= int(dim)
        total += count * _ELEMENT_BYTES[dtype]
    return total


def find_collectives(hlo_text: str) -> list[Collective]:
    """Every collective instruction in an HLO module's text, in order."""
    found = []
    for line in hlo_text.splitlines():
        match = _INSTRUCTION.search(line)
        if match is None:
            continue
        result = shape_bytes(match.group("result"))
        operands = shape_bytes(match.group("operands"))
        found.append(Collective(match.group("kind"), max(result, operands), line.strip()))
    return found


def summarize(collectives: Iterable[Collective]) -> dict[str, CollectiveSummary]:
    """Group collectives by kind (every kind present, zero when absent)."""
    counts = {kind: [0, 0] for kind in KINDS}
    for collective in collectives:
        counts[collective.kind][0] += 1
        counts[collective.kind][1] += collective.bytes_per_device
    return {kind: CollectiveSummary(kind, c, b) for kind, (c, b) in counts.items()}
