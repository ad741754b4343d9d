"""Device grids: which device holds which shard of a tensor, as text or HTML.

Like ``jax.debug.visualize_array_sharding``, but for any value of a module
(from its sdy sharding and the mesh) as well as for a ``jax.Array``, and for
any rank: a 1-D or 2-D tensor is drawn as a grid of its shards (rows along
dimension 0, columns along dimension 1) with the logical devices holding
each; higher ranks list every shard with its index and devices. Logical
device ``i`` is the ``i``-th device of the mesh in row-major order.
"""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from math import prod
from typing import Any

import numpy as np

from shardc.compiler.sharding.tensor import TensorSharding


@dataclass(frozen=True)
class ShardGrid:
    """Shards of one tensor: shards per dimension and the devices holding each shard."""

    shape: tuple[int, ...]
    splits: tuple[int, ...]
    devices: Mapping[tuple[int, ...], tuple[int, ...]]

    @property
    def replicated(self) -> bool:
        """Whether every device holds the whole tensor."""
        return all(s == 1 for s in self.splits)

    def shard_shape(self) -> tuple[int, ...]:
        """Per-device shard shape (a padded dimension rounds up)."""
        return tuple(-(-size // n) for size, n in zip(self.shape, self.splits))

    def format_text(self) -> str:
        """The grid as boxes of device ids (see the module docstring)."""
        if self.replicated:
            devices = next(iter(self.devices.values()), ())
            return f"replicated: every one of {len(devices)} devices holds {list(self.shape)}\n"
        if len(self.shape) > 2:
            lines = [f"shard {list(index)}: devices {list(devs)}"
                     for index, devs in sorted(self.devices.items())]
            return "\n".join(lines) + "\n"
        rows = self.splits[0] if self.shape else 1
        cols = self.splits[1] if len(self.shape) == 2 else 1
        cells = [[_devices_text(self.devices.get(_index(r, c, len(self.shape)), ()))
                  for c in range(cols)] for r in range(rows)]
        width = max(len(cell) for row in cells for cell in row) + 2
        rule = "+" + "+".join("-" * width for _ in range(cols)) + "+"
        lines = [rule]
        for row in cells:
            lines.append("|" + "|".join(cell.center(width) for cell in row) + "|")
            lines.append(rule)
        return "\n".join(lines) + "\n"

    def format_html(self, colour: str = "#cfe3ff") -> str:
        """The grid as a small HTML table (one cell per shard of a 1-D/2-D tensor)."""
        if self.replicated:
            return '<div class="grid replicated">replicated on all devices</div>'
        if len(self.shape) > 2:
            items = "".join(f"<li>{list(i)}: {_devices_text(d)}</li>"
                            for i, d in sorted(self.devices.items()))
            return f'<ul class="grid">{items}</ul>'
        rows = self.splits[0]
        cols = self.splits[1] if len(self.shape) == 2 else 1
        body = "".join(
            "<tr>" + "".join(
                f'<td style="background:{colour}">'
                f"{html.escape(_devices_text(self.devices.get(_index(r, c, len(self.shape)), ())))}"
                "</td>" for c in range(cols)) + "</tr>"
            for r in range(rows))
        return f'<table class="grid">{body}</table>'


def _index(row: int, col: int, rank: int) -> tuple[int, ...]:
    return (row, col)[:rank]


def _devices_text(devices: Sequence[int]) -> str:
    return ",".join(map(str, devices)) if devices else "-"


def grid_of_sharding(shape: Sequence[int], sharding: TensorSharding | None,
                     mesh_sizes: Mapping[str, int]) -> ShardGrid:
    """The shard grid of a module value with ``sharding`` on a mesh of ``mesh_sizes``."""
    return _grid(tuple(shape), sharding, tuple(mesh_sizes.items()))


def shard_shape(shape: Sequence[int], sharding: TensorSharding | None) -> tuple[int, ...]:
    """Per-device shard shape of ``shape`` with ``sharding`` (a padded dimension rounds
    up): ``grid_of_sharding(...).shard_shape()`` without placing a single device."""
    return _shard_shape(tuple(shape), sharding)


@lru_cache(maxsize=65536)
def _shard_shape(shape: tuple[int, ...], sharding: TensorSharding | None) -> tuple[int, ...]:
    return tuple(-(-size // n) for size, n in zip(shape, _splits(shape, sharding)))


def _splits(shape: tuple[int, ...], sharding: TensorSharding | None) -> tuple[int, ...]:
    dims = sharding.dims if sharding is not None else ()
    return tuple(prod(a.size for a in dims[d].axes) if d < len(dims) else 1
                 for d in range(len(shape)))


@lru_cache(maxsize=1024)
def _grid(shape: tuple[int, ...], sharding: TensorSharding | None,
          sizes: tuple[tuple[str, int], ...]) -> ShardGrid:
    # Each device's shard index, per dimension, from its mesh coordinates: one
    # array operation per (dimension, axis), then devices grouped by index.
    names = [name for name, _ in sizes]
    count = prod(size for _, size in sizes)
    coords = np.indices([size for _, size in sizes]).reshape(len(sizes), count)
    coordinate = dict(zip(names, coords))
    dims = sharding.dims if sharding is not None else ()
    index = np.zeros((len(shape), count), dtype=np.int64)
    for d in range(len(shape)):
        for axis in (dims[d].axes if d < len(dims) else ()):
            index[d] = index[d] * axis.size + (coordinate[axis.name] // axis.pre) % axis.size
    keys, owner = np.unique(index.T, axis=0, return_inverse=True)
    order = np.argsort(owner.reshape(-1), kind="stable")
    groups = np.split(order, np.cumsum(np.bincount(owner.reshape(-1)))[:-1])
    devices = {tuple(int(i) for i in key): tuple(group.tolist())
               for key, group in zip(keys, groups)}
    return ShardGrid(shape, _splits(shape, sharding), devices)


def grid_of_array(array: Any) -> ShardGrid:
    """The shard grid of a ``jax.Array`` (any sharding type), from its device index map."""
    shape = tuple(array.shape)
    index_map = array.sharding.devices_indices_map(shape)
    starts: list[set[int]] = [set() for _ in shape]
    for index in index_map.values():
        for d, part in enumerate(index):
            starts[d].add(part.start or 0)
    order = [sorted(s) for s in starts]
    devices: dict[tuple[int, ...], list[int]] = {}
    for device, index in index_map.items():
        key = tuple(order[d].index(part.start or 0) for d, part in enumerate(index))
        devices.setdefault(key, []).append(device.id)
    return ShardGrid(shape, tuple(len(o) for o in order),
                     {k: tuple(sorted(v)) for k, v in devices.items()})


def visualize(array: Any) -> str:
    """Text device grid of a ``jax.Array`` (what ``jax.debug.visualize_array_sharding`` draws)."""
    return grid_of_array(array).format_text()
