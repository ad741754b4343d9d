"""Which collectives a reshard needs, as XLA's SPMD partitioner emits them on CPU.

``reshard_collectives(shape, element_bytes, src, dst)`` compares two tensor
shardings dimension by dimension and predicts the collectives XLA inserts to
go from one to the other (cost-aware-sharding.md, section 2): nothing when
``dst`` only adds axes (a free dynamic-slice); a collective-permute when
both tile the tensor the same way over different axes; an all-to-all when
axes move from one dimension to another; otherwise all-gathers, one per
dimension (minor-most first), over every axis ``src`` has and ``dst`` does not
keep. Bytes are per device, counted as
``shardc.runtime.collectives`` counts XLA's instructions: the larger side of
each collective (the gathered result of an all-gather, the shard of an
all-to-all or collective-permute, the buffer of an all-reduce), with
uneven dimensions padded to a multiple of their shard count.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from math import prod

from shardc.compiler.propagation.axes import AxisRef, size_product
from shardc.compiler.propagation.sharding import TensorSharding

ALL_GATHER = "all-gather"
ALL_REDUCE = "all-reduce"
ALL_TO_ALL = "all-to-all"
COLLECTIVE_PERMUTE = "collective-permute"
REDUCE_SCATTER = "reduce-scatter"
KINDS = (ALL_GATHER, ALL_REDUCE, ALL_TO_ALL, COLLECTIVE_PERMUTE, REDUCE_SCATTER)


@dataclass(frozen=True)
class Collective:
    """One predicted collective: kind, the mesh axes it runs over, bytes per device."""

    kind: str
    axes: tuple[str, ...]
    bytes_per_device: int


def dim_axes(sharding: TensorSharding | None, rank: int) -> list[tuple[AxisRef, ...]]:
    """The axes of each dimension (none for a missing sharding)."""
    if sharding is None:
        return [()] * rank
    return [dim.axes for dim in sharding.dims]


def shard_shape(shape: Sequence[int], axes: Sequence[Sequence[AxisRef]]) -> list[int]:
    """Per-device shape: each dimension divided (rounded up) by its axes' product."""
    return [-(-size // max(size_product(dim), 1)) for size, dim in zip(shape, axes)]


def shard_bytes(shape: Sequence[int], element_bytes: int,
                axes: Sequence[Sequence[AxisRef]]) -> int:
    """Bytes of one device's shard."""
    total = element_bytes
    for size in shard_shape(shape, axes):
        total *= size
    return total


def _names(axes: Sequence[AxisRef]) -> tuple[str, ...]:
    return tuple(str(a).strip('"') for a in axes)


def _common_prefix(a: Sequence[AxisRef], b: Sequence[AxisRef]) -> int:
    k = 0
    while k < len(a) and k < len(b) and a[k] == b[k]:
        k += 1
    return k


def reshard_collectives(
    shape: Sequence[int],
    element_bytes: int,
    src: TensorSharding | None,
    dst: TensorSharding | None,
) -> list[Collective]:
    """The collectives that turn a ``src``-sharded tensor into a ``dst``-sharded one."""
    rank = len(shape)
    before, after = dim_axes(src, rank), dim_axes(dst, rank)
    if before == after:
        return []
    removed, added = [], []
    for b, a in zip(before, after):
        k = _common_prefix(b, a)
        removed.append(tuple(b[k:]))
        added.append(tuple(a[k:]))
    if not any(removed):
        return []  # dst only adds axes: every device slices its part, no communication
    src_bytes = shard_bytes(shape, element_bytes, before)
    if [size_product(d) for d in before] == [size_product(d) for d in after]:
        return [Collective(COLLECTIVE_PERMUTE, _names(sum(removed, ())), src_bytes)]
    moved = _moved_axes(removed, added)
    out: list[Collective] = []
    kept = [list(b) for b in before]
    dropped = [axis for d, axes in enumerate(removed) for axis in axes if axis not in moved]
    # XLA gathers one dimension at a time, the minor-most first, and gathers
    # padded shards (a slice drops the padding afterwards).
    local = shard_shape(shape, before)
    for d in reversed(range(rank)):
        gathered = [axis for axis in kept[d] if axis in dropped]
        if gathered:
            kept[d] = [axis for axis in kept[d] if axis not in dropped]
            local[d] *= size_product(gathered)
            out.append(Collective(ALL_GATHER, _names(gathered), element_bytes * prod(local)))
    if moved:
        out.append(Collective(ALL_TO_ALL, _names(moved), element_bytes * prod(local)))
    return out


def _moved_axes(removed: Sequence[Sequence[AxisRef]],
                added: Sequence[Sequence[AxisRef]]) -> list[AxisRef]:
    """Axes that leave one dimension and reappear in another (all-to-all material)."""
    moved = []
    for d, axes in enumerate(removed):
        for axis in axes:
            if any(axis in other for e, other in enumerate(added) if e != d):
                moved.append(axis)
    return moved


def all_reduce(shape: Sequence[int], element_bytes: int,
               axes: Sequence[Sequence[AxisRef]], over: Sequence[AxisRef]) -> Collective:
    """The all-reduce of partial results over ``over`` (buffer: the result shard)."""
    kept = [[axis for axis in dim if axis not in over] for dim in axes]
    return Collective(ALL_REDUCE, _names(over), shard_bytes(shape, element_bytes, kept))
