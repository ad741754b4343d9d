"""The collectives in a compiled (partitioned) HLO module: kind, count, bytes per device.

This is the communication figure benchmarks and tests compare: it is read
from the HLO XLA will actually run, after SPMD partitioning. For each
collective instruction, the bytes counted are those of its larger side on one
device (the gathered result of an all-gather, the full operand of a
reduce-scatter, the buffer of an all-reduce, all-to-all or collective-permute):
the data each device sends or receives, up to the algorithm's constant factor.

Each collective also says where it comes from, as XLA's metadata records it:
the jax op name (``jit(step)/jvp(Model)/block_0/mlp/down/dot_general``) and
the source frame of the user's code that traced the op (the module's
``FileNames`` / ``FunctionNames`` / ``FileLocations`` / ``StackFrames``
tables, resolved through ``stack_frame_id``). ``CollectiveTable`` lists them
(``Compiled.explain_collectives()``).
"""

from __future__ import annotations

import dataclasses
import json
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
    r"=\s*(?P<result>\(.*?\)|\S+)\s+(?P<kind>" + "|".join(KINDS) + r")(?P<start>-start)?"
    r"\((?P<operands>[^)]*)\)"
)
# XLA:TPU forms a reduce-scatter as a fusion of an all-reduce and the dynamic-slice
# of each device's part, calling a computation of this name: the all-reduce in it
# counts as that reduce-scatter (its buffer is the reduce-scatter's full operand).
_REDUCE_SCATTER_FUSION = "%all-reduce-scatter"
_ARRAY_SHAPE = re.compile(r"\b([a-z]+\d*[a-z0-9]*)\[([\d,]*)\]")
# `[ROOT] %name = <shape> ...`: the shape each instruction of a computation defines, by
# name. XLA prints an instruction's operands by name only (`reduce-scatter(%fusion)`),
# so an operand's bytes are those of the shape its defining instruction declares.
_DEFINITION = re.compile(r"^\s*(?:ROOT\s+)?(?P<name>%[\w.\-]+)\s*=\s*(?P<shape>\(.*?\)|\S+)\s")
_OPERAND_NAME = re.compile(r"%[\w.\-]+")


_OP_NAME = re.compile(r'metadata=\{[^}]*?op_name="(?P<name>[^"]*)"')
_FRAME_ID = re.compile(r"metadata=\{[^}]*?stack_frame_id=(?P<id>\d+)")
_TABLE_ROW = re.compile(r"^(?P<id>\d+) (?P<value>.*)$")
_FIELD = re.compile(r"(\w+)=(\d+)")


@dataclasses.dataclass(frozen=True)
class SourceFrame:
    """A line of the user's code: file, line, column and the enclosing function."""

    file: str
    line: int
    column: int
    function: str

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.column} ({self.function})"


@dataclasses.dataclass(frozen=True)
class Collective:
    """One collective instruction of the partitioned module, and where it comes from
    (``op_name``: the jax op XLA partitioned; ``source``: the user's line that traced
    it; either None where XLA's metadata has none)."""

    kind: str
    bytes_per_device: int
    line: str
    op_name: str | None = None
    source: SourceFrame | None = None


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


def result_bytes(result: str, start: bool = False) -> int:
    """Bytes of a collective's result shape ``result``. An asynchronous one's start
    (``collective-permute-start``, ``all-gather-start``) defines a tuple of its operand,
    its result and, for a permute, two u32 contexts: its result is the tuple's second
    element, not the tuple's sum (which would count the operand and the result)."""
    if start and result.startswith("("):
        elements = top_level_elements(result[1:-1])
        if len(elements) > 1:
            return shape_bytes(elements[1])
    return shape_bytes(result)


def top_level_elements(text: str) -> list[str]:
    """The comma-separated elements of ``text`` outside any brackets (a layout's
    ``{1,0}``, a shape's ``[4,2]``, a nested tuple's parentheses): ``a, b(c, d), (e, f)``
    is three; none of an empty ``text``."""
    elements, depth, start = [], 0, 0
    for k, char in enumerate(text):
        if char in "([{":
            depth += 1
        elif char in ")]}":
            depth -= 1
        elif char == "," and depth == 0:
            elements.append(text[start:k].strip())
            start = k + 1
    if text[start:].strip():
        elements.append(text[start:].strip())
    return elements


def find_collectives(hlo_text: str) -> list[Collective]:
    """Every collective instruction in an HLO module's text, in order, with its source."""
    frames = stack_frames(hlo_text)
    found = []
    computation = ""
    shapes: dict[str, str] = {}  # the current computation's instructions' shapes, by name
    for line in hlo_text.splitlines():
        if line.startswith("%") or line.startswith("ENTRY"):
            computation = line.split()[1 if line.startswith("ENTRY") else 0]
            shapes = {}
        definition = _DEFINITION.match(line)
        if definition is not None:
            shapes[definition.group("name")] = definition.group("shape")
        match = _INSTRUCTION.search(line)
        if match is None:
            continue
        kind = match.group("kind")
        if kind == "all-reduce" and computation.startswith(_REDUCE_SCATTER_FUSION):
            kind = "reduce-scatter"  # XLA:TPU's: an all-reduce and a slice, fused
        result = result_bytes(match.group("result"), bool(match.group("start")))
        operands = shape_bytes(match.group("operands")) or sum(
            shape_bytes(shapes.get(name, "")) for name in _OPERAND_NAME.findall(match.group("operands")))
        op_name, frame_id = _OP_NAME.search(line), _FRAME_ID.search(line)
        found.append(Collective(
            kind, max(result, operands), line.strip(),
            op_name.group("name") if op_name else None,
            frames.get(int(frame_id.group("id"))) if frame_id else None,
        ))  # fmt: skip
    return found


def stack_frames(hlo_text: str) -> dict[int, SourceFrame]:
    """The source frame of each ``stack_frame_id`` of an HLO module's text: the tables
    XLA prints before the computations (files and functions by id, locations naming
    them, frames naming a location and their caller's frame)."""
    tables: dict[str, dict[int, str]] = {}
    current = None
    for line in hlo_text.splitlines():
        if line in ("FileNames", "FunctionNames", "FileLocations", "StackFrames"):
            current = tables.setdefault(line, {})
            continue
        row = _TABLE_ROW.match(line) if current is not None else None
        if row is None:
            current = None
            if line.startswith(("ENTRY", "%")):
                break  # the tables come first
            continue
        current[int(row.group("id"))] = row.group("value")
    files, functions = tables.get("FileNames", {}), tables.get("FunctionNames", {})
    locations = {}
    for key, value in tables.get("FileLocations", {}).items():
        fields = dict(_FIELD.findall(value))
        locations[key] = SourceFrame(
            files.get(int(fields.get("file_name_id", 0)), "?").strip('"'),
            int(fields.get("line", 0)), int(fields.get("column", 0)),
            functions.get(int(fields.get("function_name_id", 0)), "?").strip('"'),
        )  # fmt: skip
    frames = {}
    for key, value in tables.get("StackFrames", {}).items():
        location = locations.get(int(dict(_FIELD.findall(value)).get("file_location_id", 0)))
        if location is not None:
            frames[key] = location
    return frames


@dataclasses.dataclass(frozen=True)
class CollectiveTable:
    """Every collective of a compiled program with the op and source line it comes from."""

    entries: tuple[Collective, ...]

    def format_text(self) -> str:
        """One line per collective: kind, bytes per device, jax op name, source line."""
        lines = [f"{'kind':<19} {'bytes/dev':>10}  {'op':<60} source"]
        for entry in self.entries:
            op = entry.op_name or "?"
            op = op if len(op) <= 60 else op[:57] + "..."
            lines.append(f"{entry.kind:<19} {entry.bytes_per_device:>10}  {op:<60} "
                         f"{entry.source or 'unknown'}")
        return "\n".join(lines) + "\n"

    def to_json(self) -> str:
        """The entries as JSON (source as file, line, column, function)."""
        return json.dumps([
            {"kind": e.kind, "bytes_per_device": e.bytes_per_device, "op_name": e.op_name,
             "source": dataclasses.asdict(e.source) if e.source else None}
            for e in self.entries
        ], indent=1)  # fmt: skip


def summarize(collectives: Iterable[Collective]) -> dict[str, CollectiveSummary]:
    """Group collectives by kind (every kind present, zero when absent)."""
    counts = {kind: [0, 0] for kind in KINDS}
    for collective in collectives:
        counts[collective.kind][0] += 1
        counts[collective.kind][1] += collective.bytes_per_device
    return {kind: CollectiveSummary(kind, c, b) for kind, (c, b) in counts.items()}
