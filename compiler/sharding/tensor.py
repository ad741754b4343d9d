"""Tensor shardings as pure-Python values, and their text form.

``TensorSharding`` mirrors ``#sdy.sharding<@mesh, [dims], replicated=...,
unreduced=...>`` as tuples: a mesh *name*, one ``DimSharding`` per dimension
(axes major to minor, closed flag, priority or None) and the replicated and
unreduced axis lists. ``MeshInfo`` holds what a mesh symbol says about its
axes. ``parse_sharding`` / ``parse_per_value`` read the printed attribute
(one regex pass, callers cache per attribute); ``format_sharding`` prints it
back exactly as MLIR would, so we build attributes by parsing that text.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import NamedTuple

from shardc.compiler.sharding.axes import AxisRef


class DimSharding(NamedTuple):
    """One dimension: axes major to minor, closed flag and optional priority."""

    axes: tuple[AxisRef, ...]
    closed: bool
    priority: int | None = None


class TensorSharding(NamedTuple):
    """One tensor's sharding on the mesh symbol ``mesh``."""

    mesh: str
    dims: tuple[DimSharding, ...]
    replicated: tuple[AxisRef, ...] = ()
    unreduced: tuple[AxisRef, ...] = ()

    def has_no_axes(self) -> bool:
        """Whether no dimension, replicated or unreduced list names an axis."""
        return not self.replicated and not self.unreduced and not any(
            d.axes for d in self.dims
        )


@dataclass(frozen=True)
class MeshInfo:
    """A mesh symbol: axis sizes and order, and the text that decides equality."""

    name: str
    sizes: dict[str, int]
    order: dict[str, int]
    key: str
    maximal: bool
    empty: bool


def open_sharding(mesh: str, rank: int) -> TensorSharding:
    """The fully open, empty sharding ``[{?}, ...]`` on ``mesh``."""
    return TensorSharding(mesh, (DimSharding((), False),) * rank)


_MESH_AXIS = re.compile(r'"((?:[^"\\]|\\.)*)"\s*=\s*(\d+)')


def parse_mesh(name: str, text: str) -> MeshInfo:
    """Read ``#sdy.mesh<["x"=4, "y"=2], device_ids=[...]>`` (or ``<[...]>``)."""
    body = text[text.index("<") + 1 : text.rindex(">")]
    axes_text = body[body.index("[") + 1 : body.index("]")]
    axes = [(m.group(1), int(m.group(2))) for m in _MESH_AXIS.finditer(axes_text)]
    sizes = dict(axes)
    order = {axis: i for i, (axis, _) in enumerate(axes)}
    return MeshInfo(
        name=name,
        sizes=sizes,
        order=order,
        key=body.strip(),
        maximal=not axes and "device_ids" in body,
        empty=not axes and "device_ids" not in body,
    )


_TOKEN = re.compile(
    r'\s*(?:"(?P<name>(?:[^"\\]|\\.)*)"(?::\((?P<pre>\d+)\)(?P<size>\d+))?'
    r"|(?P<punct>[\[\]{}<>,?=])|p(?P<prio>\d+)|(?P<word>[A-Za-z_#@.][\w.$@#\-]*))"
)


class _Reader:
    """A tiny cursor over the attribute text."""

    def __init__(self, text: str, meshes: dict[str, MeshInfo]):
        self.tokens = [m for m in _TOKEN.finditer(text) if m.group(0).strip()]
        self.i = 0
        self.meshes = meshes

    def peek(self) -> str:
        if self.i >= len(self.tokens):
            return ""
        return self.tokens[self.i].group(0).strip()

    def take(self) -> re.Match:
        token = self.tokens[self.i]
        self.i += 1
        return token

    def expect(self, text: str) -> None:
        token = self.take().group(0).strip()
        if token != text:
            raise ValueError(f"expected '{text}' in sharding, got '{token}'")

    def axis_list(self, sizes: dict[str, int], close: str) -> tuple[list[AxisRef], bool]:
        axes: list[AxisRef] = []
        is_open = False
        while self.peek() != close:
            token = self.take()
            if token.group("name") is not None:
                total = sizes[token.group("name")]
                if token.group("pre") is not None:
                    axes.append(AxisRef(token.group("name"), int(token.group("pre")),
                                        int(token.group("size")), total))
                else:
                    axes.append(AxisRef(token.group("name"), 1, total, total))
            elif token.group(0).strip() == "?":
                is_open = True
        self.take()
        return axes, is_open

    def sharding(self) -> TensorSharding:
        mesh_token = self.take().group(0).strip()
        if not mesh_token.startswith("@"):
            raise ValueError("inlined meshes are not supported by propagation")
        mesh = mesh_token[1:]
        sizes = self.meshes[mesh].sizes if mesh in self.meshes else {}
        self.expect(",")
        self.expect("[")
        dims = []
        while self.peek() != "]":
            if self.peek() == ",":
                self.take()
                continue
            self.expect("{")
            axes, is_open = self.axis_list(sizes, "}")
            priority = None
            if self.i < len(self.tokens) and self.tokens[self.i].group("prio") is not None:
                priority = int(self.take().group("prio"))
            dims.append(DimSharding(tuple(axes), not is_open, priority))
        self.take()
        lists = {"replicated": (), "unreduced": ()}
        while self.peek() == ",":
            self.take()
            key = self.take().group(0).strip()
            self.expect("=")
            self.expect("{")
            axes, _ = self.axis_list(sizes, "}")
            lists[key] = tuple(axes)
        return TensorSharding(mesh, tuple(dims), lists["replicated"], lists["unreduced"])


def parse_sharding(text: str, meshes: dict[str, MeshInfo]) -> TensorSharding:
    """Parse ``#sdy.sharding<...>`` (or the inner ``<...>`` of a per-value list)."""
    reader = _Reader(text[text.index("<") + 1 :], meshes)
    return reader.sharding()


def parse_per_value(text: str, meshes: dict[str, MeshInfo]) -> list[TensorSharding]:
    """Parse ``#sdy.sharding_per_value<[<...>, <...>]>``."""
    reader = _Reader(text[text.index("<") + 1 :], meshes)
    reader.expect("[")
    out = []
    while reader.peek() != "]":
        token = reader.take().group(0).strip()
        if token == "<":
            out.append(reader.sharding())
            reader.expect(">")
    return out


def _axes_text(axes: tuple[AxisRef, ...]) -> str:
    return ", ".join(map(str, axes))


def format_dim(dim: DimSharding) -> str:
    """Print one dimension: ``{}``, ``{?}``, ``{"a", ?}``, with a ``pN`` suffix."""
    inner = _axes_text(dim.axes)
    if not dim.closed:
        inner = inner + ", ?" if inner else "?"
    suffix = f"p{dim.priority}" if dim.priority is not None else ""
    return "{" + inner + "}" + suffix


def format_inner(sharding: TensorSharding) -> str:
    """Print ``<@mesh, [...], replicated={...}>`` (the per-value entry form)."""
    text = f"<@{sharding.mesh}, [" + ", ".join(map(format_dim, sharding.dims)) + "]"
    if sharding.replicated:
        text += ", replicated={" + _axes_text(sharding.replicated) + "}"
    if sharding.unreduced:
        text += ", unreduced={" + _axes_text(sharding.unreduced) + "}"
    return text + ">"


def format_sharding(sharding: TensorSharding) -> str:
    """Print ``#sdy.sharding<...>``."""
    return "#sdy.sharding" + format_inner(sharding)


def format_per_value(shardings: list[TensorSharding]) -> str:
    """Print ``#sdy.sharding_per_value<[...]>``."""
    return "#sdy.sharding_per_value<[" + ", ".join(map(format_inner, shardings)) + "]>"


@dataclass(frozen=True)
class Tensor:
    """What the cost model needs of one operand or result."""

    shape: tuple[int, ...]
    element_bytes: int
    sharding: TensorSharding | None
    # The element type as MLIR spells it ("bf16", "f32"...): collectives may move
    # another type than the tensor holds (XLA:CPU runs bf16 collectives in f32).
    dtype: str | None = None

    @property
    def global_bytes(self) -> int:
        """Bytes of the whole (unsharded) tensor."""
        total = self.element_bytes
        for size in self.shape:
            total *= size
        return total
