"""Which collectives a reshard needs, as XLA's SPMD partitioner emits them on CPU.

``reshard_collectives(shape, element_bytes, src, dst, mesh)`` turns both
shardings into XLA tile assignments (shard count per dimension, replication
count, device array on the mesh's iota device order) and follows
``PartitionedHlo::ReshardNoCache`` (docs/cost-model.md): same tiling on other
devices -> collective-permute; shard counts redistributed between dimensions
-> one all-to-all per (source, target) pair, or one for a merge/split of two
dimensions, then a collective-permute if the device order still differs;
``dst`` refines ``src`` -> free dynamic-slice (a collective-permute when the
devices do not line up); ``dst`` partially replicated -> all-gathers of the
dimensions it shards more coarsely (collective-permute first when the
gathered groups are not ``dst``'s); otherwise replicate: one all-gather per
dimension, minor-most first, over padded shards that stay padded, or an
all-reduce for a dimension no bigger than half its shard count. Bytes are
per device, counted as ``shardc.runtime.collectives`` counts XLA's
instructions (the larger side: the gathered result, the padded all-to-all
buffer, the permuted shard, the all-reduce buffer); bf16 counts 4 bytes per
element on CPU, where XLA upcasts collectives to f32. Validated by
test/python/compiler/cost/test_cost_model_table.py (bench/cost_model.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from functools import lru_cache
from math import prod

import numpy as np

from shardc.compiler.cost.platforms import PlatformRules, active_rules
from shardc.compiler.sharding.axes import AxisRef, size_product
from shardc.compiler.sharding.tensor import Tensor, TensorSharding

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


def maximal(sharding: TensorSharding | None, rank: int) -> bool:
    """Whether ``sharding`` puts a whole rank-``rank`` tensor on one device
    (``<@maximal_mesh_k, []>``, e.g. a host callback's result): only a maximal
    sharding lists fewer dimensions than its tensor has. A scalar's is told
    from its mesh alone, which this model does not see; its bytes are a few."""
    return sharding is not None and len(sharding.dims) < rank


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


def axis_names(axes: Sequence[AxisRef]) -> tuple[str, ...]:
    """The axes' names, unquoted (as a ``Collective`` lists them)."""
    return tuple(str(a).strip('"') for a in axes)


MeshAxes = Sequence[tuple[str, int]]


def collective_element_bytes(element_bytes: int, dtype: str | None,
                             rules: PlatformRules | None = None) -> int:
    """Bytes per element inside a collective on ``rules``' platform (the prediction's,
    ``platforms.active_rules``): XLA:CPU upcasts bf16 collectives to f32."""
    return (rules or active_rules()).element_bytes_in_collective(element_bytes, dtype)


def mesh_axes(mesh, src: TensorSharding | None = None,
              dst: TensorSharding | None = None) -> list[tuple]:
    """The mesh's axes, major to minor: from ``mesh`` (a ``MeshInfo`` or (name, size)
    pairs), else the axes the two shardings name, in order of first appearance."""
    if mesh is not None and hasattr(mesh, "sizes"):
        return sorted(mesh.sizes.items(), key=lambda item: mesh.order[item[0]])
    if mesh is not None:
        return list(mesh)
    seen: dict[str, int] = {}
    for sharding in (src, dst):
        if sharding is None:
            continue
        for dim in sharding.dims:
            for axis in dim.axes:
                seen.setdefault(axis.name, axis.total)
    return list(seen.items())


@dataclass(frozen=True)
class _Tiling:
    """An HLO sharding: shard count per dimension, replication count, device array.

    ``devices`` has shape ``counts + (replication,)``: entry ``[i, ..., r]``
    is the device holding tile ``(i, ...)`` (its ``r``-th replica), as in
    XLA's ``tile_assignment`` with ``last_tile_dim_replicate``.
    """

    counts: tuple[int, ...]
    replication: int
    # The device array's entries as int64 bytes, in order (hashable, compared whole;
    # a tuple of a pod's Python ints cost more to make and read than the answer).
    devices: bytes

    @property
    def array(self):
        return np.frombuffer(self.devices, dtype=np.int64).reshape(
            self.counts + (self.replication,))

    @property
    def tiles(self) -> int:
        return prod(self.counts)

    def coords(self) -> np.ndarray:
        """Each device's tile coordinates: row ``d`` is device ``d``'s (devices are
        ``0 .. n-1``), one array operation whatever the device count."""
        flat = np.frombuffer(self.devices, dtype=np.int64)
        place = np.empty(len(flat), dtype=np.int64)
        place[flat] = np.arange(len(flat))
        index = np.unravel_index(place, self.counts + (self.replication,))[:-1]
        return np.stack(index, axis=-1) if index else np.zeros((len(flat), 0), np.int64)


@lru_cache(maxsize=4096)
def _tiling(sharding: TensorSharding | None, rank: int,
            axes: tuple[tuple[str, int], ...]) -> _Tiling:
    """XLA's tile assignment for ``sharding`` on a mesh of ``axes`` (devices in iota order),
    once per sharding: a program reshards each of a few shardings to several others."""
    per_dim = dim_axes(sharding, rank)
    # Split every mesh axis into the sub-axes any dimension uses (major to minor).
    cuts: dict[str, set[int]] = {name: {1, size} for name, size in axes}
    for dim in per_dim:
        for ref in dim:
            if ref.name in cuts:
                cuts[ref.name] |= {ref.pre, ref.pre * ref.size}
    pieces: list[tuple[str, int, int]] = []  # (axis, pre, size) major to minor
    for name, size in axes:
        points = sorted(cuts[name])
        for lo, hi in zip(points, points[1:]):
            pieces.append((name, lo, hi // lo))
    array = np.arange(prod(size for _, size in axes)).reshape(
        [size for _, _, size in pieces] or [1])
    order: list[int] = []
    counts = []
    for dim in per_dim:
        count = 1
        for ref in dim:
            for k, (name, pre, size) in enumerate(pieces):
                if (name == ref.name and ref.pre <= pre and pre * size <= ref.pre * ref.size
                        and k not in order):  # an axis named twice counts once
                    order.append(k)
                    count *= size
        counts.append(count)
    rest = [k for k in range(len(pieces)) if k not in order]
    array = array.transpose(order + rest) if pieces else array
    replication = prod(pieces[k][2] for k in rest) if rest else 1
    array = array.reshape(tuple(counts) + (replication,))
    return _Tiling(tuple(counts), replication, _entries(array))


def _entries(array: np.ndarray) -> bytes:
    """``_Tiling.devices`` of a device array."""
    return np.ascontiguousarray(array, dtype=np.int64).tobytes()


def _local(shape: Sequence[int], counts: Sequence[int]) -> list[int]:
    return [-(-size // n) for size, n in zip(shape, counts)]


def _bytes(local: Sequence[int], element_bytes: int) -> int:
    return element_bytes * prod(local)


def _all_to_all_pairs(src: _Tiling, dst: _Tiling) -> list[tuple[int, int]] | None:
    """XLA's ``GetReshardAllToAllSourceTargetDims`` over the data dimensions."""
    if src.replication != dst.replication or src.tiles != dst.tiles:
        return None
    source: dict[int, list[int]] = {}
    target: dict[int, list[int]] = {}
    for i, (a, b) in enumerate(zip(src.counts, dst.counts)):
        if a != b:
            source.setdefault(a, []).append(i)
            target.setdefault(b, []).append(i)
    if not source or sorted((k, len(v)) for k, v in source.items()) != sorted(
            (k, len(v)) for k, v in target.items()):
        return None

    def remove(size, dim, table):
        table[size] = [d for d in table[size] if d != dim]
        if not table[size]:
            del table[size]

    result = []
    while source:
        size = min(source)
        i = source[size][-1]
        want = dst.counts[i]
        if want == size:
            remove(size, i, source)
            remove(size, i, target)
            continue
        candidates = source.get(want)
        if not candidates:
            return None
        j = candidates[0]
        if size == 1:
            for c in candidates:
                j = c
                if dst.counts[c] != 1:
                    break
        elif want % size == 0:
            for c in candidates:
                j = c
                if dst.counts[c] == size:
                    break
        else:
            return None
        result.append((j, i))
        remove(want, i, target)
        source[size][-1] = j
        remove(want, j, source)
    return result


def _swap(tiling: _Tiling, source: int, target: int, group: int | None = None) -> _Tiling:
    """The sharding after one all-to-all from ``source`` to ``target`` (XLA's
    ``GetAllToAllSharding``): the minor part of the source dimension's devices
    becomes the minor part of the target dimension."""
    if group is None:
        group = tiling.counts[source] // tiling.counts[target]
    array = tiling.array
    shape = list(array.shape)
    split = shape[:source] + [shape[source] // group, group] + shape[source + 1:]
    array = array.reshape(split)
    # axes of `split`: dims before source, (source major, source minor), dims after
    index = list(range(len(split)))
    minor = source + 1
    t = target if target < source else target + 1
    order = [k for k in index if k != minor]
    order.insert(order.index(t) + 1, minor)
    moved = array.transpose(order)
    counts = list(tiling.counts)
    counts[source] //= group
    counts[target] *= group
    moved = moved.reshape(tuple(counts) + (tiling.replication,))
    return _Tiling(tuple(counts), tiling.replication, _entries(moved))


def _nested(inner: _Tiling, outer: _Tiling) -> bool:
    """Whether every device's ``inner`` tile lies inside its ``outer`` tile."""
    if any(i % o for i, o in zip(inner.counts, outer.counts)):
        return False
    ratio = np.array([i // o for i, o in zip(inner.counts, outer.counts)], dtype=np.int64)
    return bool(np.array_equal(inner.coords() // ratio, outer.coords()))


def _replicate(shape, element_bytes, counts, names,
               kept: Sequence[bool] | None = None) -> list[Collective]:
    """XLA's ``Replicate``: each sharded dimension, minor-most first, is gathered
    (padded shards); a dimension no bigger than half its shard count is
    rebuilt with dynamic-update-slice into zeros plus an all-reduce. ``kept``
    dimensions stay sharded (the reshard is grouped on them)."""
    out = []
    local = _local(shape, counts)
    for d in reversed(range(len(shape))):
        n = counts[d]
        if n == 1 or (kept is not None and kept[d]):
            continue
        if shape[d] * 2 <= n:
            local[d] = shape[d]
            out.append(Collective(ALL_REDUCE, names[d], _bytes(local, element_bytes)))
        else:
            local[d] *= n  # padded shards stay padded until the final slice
            out.append(Collective(ALL_GATHER, names[d], _bytes(local, element_bytes)))
    return out


def _merge_or_split(a: _Tiling, b: _Tiling, shape: Sequence[int]) -> tuple[int, int, int] | None:
    """XLA's merge/split patterns (``PatternMatchMergeOrSplitSharding``): two
    dimensions differ, the source dimension's count shrinks by ``group`` and the
    target's grows by it (one all-to-all). XLA splits the dimension that keeps
    tiles in two first: merging all of the source's tiles into the target needs the
    target's shard to split into them, and splitting tiles out of the source into an
    unsharded target needs the source to divide evenly (else it replicates)."""
    if a.replication != b.replication or a.tiles != b.tiles:
        return None
    diff = [i for i, (x, y) in enumerate(zip(a.counts, b.counts)) if x != y]
    if len(diff) != 2:
        return None
    for source, target in (diff, diff[::-1]):
        x, y = a.counts[source], b.counts[source]
        if y < x and x % y == 0 and b.counts[target] == a.counts[target] * (x // y):
            if y == 1 and -(-shape[target] // a.counts[target]) % x:
                return None
            if a.counts[target] == 1 and shape[source] % x:
                return None
            return source, target, x // y
    return None


def _coarsen(a: _Tiling, keep: Sequence[int]) -> _Tiling | None:
    """``a`` with each dimension's count cut to ``keep`` (the major part kept,
    the rest replicated), as after an all-gather over the minor part."""
    array = a.array
    split = []
    for count, k in zip(a.counts, keep):
        split += [k, count // k]
    array = array.reshape(split + [a.replication])
    rank = len(keep)
    order = [2 * i for i in range(rank)] + [2 * i + 1 for i in range(rank)] + [2 * rank]
    array = array.transpose(order).reshape(tuple(keep) + (-1,))
    return _Tiling(tuple(keep), array.shape[-1], _entries(array))


def _gather(shape, element_bytes, counts, keep, names) -> list[Collective]:
    """All-gathers (or the all-reduce of tiny dimensions) from ``counts`` to ``keep``."""
    out = []
    counts = list(counts)
    local = _local(shape, counts)
    for d in reversed(range(len(shape))):
        if counts[d] == keep[d]:
            continue
        if keep[d] == 1 and shape[d] * 2 <= counts[d]:
            local[d] = shape[d]
            out.append(Collective(ALL_REDUCE, names[d], _bytes(local, element_bytes)))
        else:
            local[d] *= counts[d] // keep[d]
            out.append(Collective(ALL_GATHER, names[d], _bytes(local, element_bytes)))
        counts[d] = keep[d]
    return out


def reshard_collectives(
    shape: Sequence[int],
    element_bytes: int,
    src: TensorSharding | None,
    dst: TensorSharding | None,
    mesh=None,
    *,
    dtype: str | None = None,
    rules: PlatformRules | None = None,
) -> list[Collective]:
    """The collectives that turn a ``src``-sharded tensor into a ``dst``-sharded one.

    Follows ``PartitionedHlo::ReshardNoCache`` (cost-model.md): equal tilings
    on other devices -> collective-permute; shard counts redistributed
    between dimensions -> all-to-all per (source, target) pair, then a
    collective-permute if the device order still differs; ``dst`` a
    refinement of ``src`` -> free dynamic-slice (collective-permute when the
    devices do not line up); ``src`` a refinement of ``dst`` -> all-gather
    over the dropped tiles (collective-permute first when they do not line
    up); otherwise replicate (all-gathers, minor-most dimension first) and
    slice. ``mesh`` (a ``MeshInfo`` or (axis, size) pairs, major to minor)
    fixes the device order; without it the axes the shardings name are used.
    On CPU, XLA runs bf16 collectives in f32 (``dtype="bf16"`` counts 4 bytes
    per element, as the compiled HLO shows); ``rules``: the platform's
    (``platforms.active_rules()`` when None).
    """
    element_bytes = collective_element_bytes(element_bytes, dtype, rules)
    rank = len(shape)
    if maximal(src, rank):
        if maximal(dst, rank) and dst.mesh == src.mesh:
            return []
        # XLA's ``PartitionedHlo::Broadcast``: the owning device's value, zeros on the
        # others, all-reduced over every device; any tiling is then a free slice.
        names = tuple(name for name, _ in mesh_axes(mesh, None, dst))
        return [Collective(ALL_REDUCE, names, _bytes(shape, element_bytes))]
    if maximal(dst, rank):
        dst = None  # XLA replicates onto every device; the owner keeps its copy
    if dim_axes(src, rank) == dim_axes(dst, rank):
        return []
    return list(_reshard(tuple(shape), element_bytes, src, dst,
                         tuple(mesh_axes(mesh, src, dst))))


@lru_cache(maxsize=65536)
def _reshard(shape: tuple[int, ...], element_bytes: int, src: TensorSharding | None,
             dst: TensorSharding | None, axes: tuple[tuple[str, int], ...]
             ) -> tuple[Collective, ...]:
    """``reshard_collectives`` once per distinct question: a program reshards the same
    shapes between the same shardings many times (every layer), and each answer
    places every device of the mesh."""
    return tuple(_reshard_uncached(shape, element_bytes, src, dst, axes))


def _reshard_uncached(shape: tuple[int, ...], element_bytes: int,
                      src: TensorSharding | None, dst: TensorSharding | None,
                      axes: tuple[tuple[str, int], ...]) -> list[Collective]:
    rank = len(shape)
    before = dim_axes(src, rank)
    a, b = _tiling(src, rank, axes), _tiling(dst, rank, axes)
    if a == b:
        return []
    names = [axis_names(d) for d in before]
    moved_names = axis_names([ax for d in before for ax in d])
    if a.counts == b.counts and a.replication == b.replication:
        return [Collective(COLLECTIVE_PERMUTE, moved_names,
                           _bytes(_local(shape, a.counts), element_bytes))]
    moved = _all_to_all_collectives(shape, element_bytes, a, b, names, moved_names)
    if moved is not None:
        return moved
    if b.tiles > a.tiles and all(y % x == 0 for x, y in zip(a.counts, b.counts)):
        if _nested(b, a):
            return []  # every device slices its part of what it holds
        return [Collective(COLLECTIVE_PERMUTE, moved_names,
                           _bytes(_local(shape, b.counts), element_bytes))]
    moved = _from_partial_replication(shape, element_bytes, a, b, names, moved_names)
    if moved is not None:
        return moved
    if b.replication > 1:
        # Gather the dimensions ``dst`` shards more coarsely (or along other
        # factors), then slice what ``dst`` shards more finely.
        keep = [x if y % x == 0 else y if x % y == 0 else 1
                for x, y in zip(a.counts, b.counts)]
        if all(x % k == 0 for x, k in zip(a.counts, keep)) and prod(keep) < a.tiles:
            out = []
            if not _nested(b, _coarsen(a, keep)):
                # the gathered groups are not the devices ``dst`` groups: permute first
                out.append(Collective(COLLECTIVE_PERMUTE, moved_names,
                                      _bytes(_local(shape, a.counts), element_bytes)))
            return out + _gather(shape, element_bytes, a.counts, keep, names)
    # Dimensions both tile alike are grouped on first; only the rest is replicated
    # inside the groups (``ReshardNoCache``'s equal-dimension grouping).
    kept = [x > 1 and x == y for x, y in zip(a.counts, b.counts)]
    return _replicate(shape, element_bytes, a.counts, names, kept)


def _all_to_all_collectives(shape, element_bytes, a: _Tiling, b: _Tiling, names,
                            moved_names) -> list[Collective] | None:
    """``a`` to ``b`` (as many replicas) by all-to-alls: one per (source, target) pair
    or one for a merge/split of two dimensions, then a collective-permute where the
    devices still differ. None when neither pattern fits."""
    pairs = _all_to_all_pairs(a, b)
    if pairs:
        out = []
        current = a
        for source, target in pairs:
            group = current.counts[source] // current.counts[target]
            local = _local(shape, current.counts)
            after_counts = list(current.counts)
            after_counts[target] *= group
            local[target] = -(-shape[target] // after_counts[target]) * group
            out.append(Collective(ALL_TO_ALL, names[source], _bytes(local, element_bytes)))
            current = _swap(current, source, target)
        if current != b:
            out.append(Collective(COLLECTIVE_PERMUTE, moved_names,
                                  _bytes(_local(shape, b.counts), element_bytes)))
        return out
    merge = _merge_or_split(a, b, shape)
    if merge is not None:
        source, target, group = merge
        local = _local(shape, a.counts)
        local[target] = -(-shape[target] // b.counts[target]) * group
        out = [Collective(ALL_TO_ALL, names[source], _bytes(local, element_bytes))]
        if _swap(a, source, target, group) != b:
            out.append(Collective(COLLECTIVE_PERMUTE, moved_names,
                                  _bytes(_local(shape, b.counts), element_bytes)))
        return out
    return None


def _sliced(tiling: _Tiling, dim: int) -> _Tiling:
    """``tiling`` with its replication swapped into dimension ``dim`` (unsharded):
    every device slices its part of what it holds."""
    array = tiling.array
    order = list(range(len(tiling.counts) + 1))
    order[dim], order[-1] = order[-1], order[dim]
    array = array.transpose(order)
    return _Tiling(array.shape[:-1], 1, _entries(array))


def _from_partial_replication(shape, element_bytes, a: _Tiling, b: _Tiling, names,
                              moved_names) -> list[Collective] | None:
    """A partially replicated ``a`` to a fully tiled ``b`` that does not refine it.

    ``ReshardPartialReplicateWithAllToAll``: when ``b``'s counts are ``a``'s shifted
    one dimension down (``a``'s first unsharded) with the replicas last, on the same
    devices in order, one all-to-all of ``a``'s shard moves them and ``b`` is sliced.
    Else ``TryComplexReshardHandling``: the replicas are swapped into the first
    dimension ``a`` leaves unsharded and ``b`` shards into a multiple of them (a free
    slice), then all-to-alls reach ``b``. None otherwise (XLA replicates).
    """
    if a.replication == 1 or b.replication != 1 or a.tiles * a.replication != b.tiles:
        return None
    rank = len(a.counts)
    if (rank > 1 and a.counts[0] == 1 and b.counts == a.counts[1:] + (a.replication,)
            and np.array_equal(a.array.reshape(b.counts), b.array[..., 0])):
        middle_counts = b.counts[:-1] + (1,)
        middle = _Tiling(middle_counts, a.replication, _entries(
            b.array.reshape(middle_counts + (a.replication,))))
        return _all_to_all_collectives(shape, element_bytes, a, middle, names, moved_names)
    for dim in range(rank):
        if b.counts[dim] != a.counts[dim] and a.counts[dim] == 1 and (
                b.counts[dim] % a.replication == 0):
            middle = _sliced(a, dim)
            if middle == b:
                return []
            if middle.counts == b.counts:
                return [Collective(COLLECTIVE_PERMUTE, moved_names,
                                   _bytes(_local(shape, b.counts), element_bytes))]
            return _all_to_all_collectives(shape, element_bytes, middle, b, names,
                                           moved_names)
    return None


def reshard_tensor(src: Tensor, dst: TensorSharding | None, mesh=None) -> list[Collective]:
    """``reshard_collectives`` for a cost-model tensor (its shape, type and sharding)."""
    return reshard_collectives(src.shape, src.element_bytes, src.sharding, dst, mesh,
                               dtype=src.dtype)


def all_reduce(result: Tensor, over: Sequence[AxisRef]) -> Collective:
    """The all-reduce of ``result``'s partial sums over ``over`` (buffer: the result
    shard without the axes reduced over, in the type XLA reduces it in).

    A result sharded over axes it is reduced over is all-reduced unsliced and
    then sliced: on a platform that forms reduce-scatters from that (XLA:TPU),
    one reduce-scatter of the same buffer (its full operand)."""
    axes = dim_axes(result.sharding, len(result.shape))
    kept = [[axis for axis in dim if axis not in over] for dim in axes]
    rules = active_rules()
    sliced = any(len(k) != len(dim) for k, dim in zip(kept, axes))
    kind = REDUCE_SCATTER if sliced and rules.forms_reduce_scatter else ALL_REDUCE
    return Collective(kind, axis_names(over), shard_bytes(
        result.shape, collective_element_bytes(result.element_bytes, result.dtype, rules),
        kept))


def dot_partial_sums(result: Tensor, over: Sequence[AxisRef],
                     ) -> list[tuple[tuple[AxisRef, ...], Collective]]:
    """The collectives that sum a dot's partial sums over ``over`` into ``result``'s sharding.

    XLA's dot partitioner reduces the partial sums over the reduced axes the result
    is sharded over first (an all-reduce of the buffer unsliced over them, then
    sliced, or the reduce-scatter formed from that), then all-reduces that slice
    over the other reduced axes: an FSDP weight gradient summed over ``fsdp`` and
    ``data`` moves its whole buffer over ``fsdp`` and only its shard over ``data``.
    A result sliced on several dimensions is all-reduced whole once per dimension,
    over its reduced axes, minor-most dimension first (XLA:CPU; one reduce-scatter
    where the platform forms them). Each collective comes with the axes it reduces
    over."""
    axes = dim_axes(result.sharding, len(result.shape))
    sliced = tuple(axis for axis in over if any(axis in dim for dim in axes))
    rest = tuple(axis for axis in over if axis not in sliced)
    out = []
    if sliced:
        whole = all_reduce(result, sliced)
        per_dim = [tuple(a for a in dim if a in sliced) for dim in reversed(axes)]
        per_dim = [step for step in per_dim if step]
        if whole.kind == ALL_REDUCE and len(per_dim) > 1:
            # Sliced on several dimensions: one all-reduce of the whole buffer per
            # dimension, minor-most first (as XLA:CPU compiles it).
            out += [(step, replace(whole, axes=axis_names(step))) for step in per_dim]
        else:
            out.append((sliced, whole))
    if rest:
        out.append((rest, all_reduce(result, rest)))
    return out
