"""Which collectives a reshard needs, as XLA's SPMD partitioner emits them on CPU.

``reshard_collectives(shape, element_bytes, src, dst, mesh)`` turns both
shardings into XLA tile assignments (shard count per dimension, replication
count, device array on the mesh's iota device order) and follows
``PartitionedHlo::ReshardNoCache`` step by step (``_Planner``, docs/cost-model.md):
same tiling on other devices -> collective-permute; shard counts redistributed
between dimensions -> all-to-alls (then a collective-permute if the device
order still differs); a partially replicated source sliced to the target (a
collective-permute when its replicas are not the target's devices); a
partially replicated target gathered in groups (a collective-permute first
when the groups are not the target's); ``TryComplexReshardHandling``'s merge /
split of a dimension, replicated dimension and replicas-to-dimension routes,
the reshard inside groups on equally split dimensions, each continued without
full replication as XLA does; otherwise replicate: one all-gather per
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
from dataclasses import dataclass, field, replace
from functools import lru_cache
from math import prod

import numpy as np

from shardc.compiler.cost.exchange import exchange_halo_compact
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
    # Devices in each of its groups where they are fewer than its axes hold (a group
    # over part of an axis, e.g. "model":(1)4 of a 16-way model axis); 0 otherwise.
    # XLA's dry runs (the gather/scatter handler's) cost a collective by it.
    group: int = field(default=0, compare=False)


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

    @property
    def partial(self) -> bool:
        """XLA's ``ReplicateOnLastTileDim``: tiled, and each tile on several devices."""
        return self.replication > 1 and self.tiles > 1

    def coords(self) -> np.ndarray:
        """Each device's tile coordinates, one row per device in increasing device id
        (a device group's inner problem holds some of the mesh's devices), one array
        operation whatever the device count."""
        flat = np.frombuffer(self.devices, dtype=np.int64)
        place = np.argsort(flat, kind="stable")
        index = np.unravel_index(place, self.counts + (self.replication,))[:-1]
        return np.stack(index, axis=-1) if index else np.zeros((len(flat), 0), np.int64)


def _from_array(array: np.ndarray) -> _Tiling:
    """The tiling of a device array whose last dimension holds the replicas."""
    return _Tiling(tuple(int(n) for n in array.shape[:-1]), int(array.shape[-1]),
                   _entries(array))


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


def _compatible(partial: _Tiling, target: _Tiling) -> _Tiling | None:
    """XLA's ``PartialReplicateReshardCompatibleSharding``: a sharding with
    ``target``'s tile counts that ``partial`` reaches by slicing its replicas
    (``target`` itself when its tiles nest in ``partial``'s); None when a
    count of ``target`` is not a multiple of ``partial``'s."""
    if not partial.partial:
        return None
    expand = []
    for have, want in zip(partial.counts, target.counts):
        if want % have:
            return None
        expand.append(want // have)
    if _nested(target, partial):
        return target
    rank = len(expand)
    grown = [k for k in range(rank) if expand[k] > 1]
    split = list(partial.counts) + [expand[k] for k in grown] + [target.replication]
    order = []
    for k in range(rank):
        order.append(k)
        if k in grown:
            order.append(rank + grown.index(k))
    order.append(len(split) - 1)
    array = partial.array.reshape(split).transpose(order)
    return _from_array(array.reshape(target.counts + (target.replication,)))


class _Planner:
    """XLA's ``PartitionedHlo::ReshardNoCache`` over tile assignments, for one tensor
    element size on one mesh: each step returns ``(collectives, reached tiling)``,
    or None where XLA's step does not apply (a route tried without full
    rematerialization gives up)."""

    def __init__(self, element_bytes: int, axes: tuple[tuple[str, int], ...]):
        self.element_bytes = element_bytes
        self.axes = axes
        self.sizes = [size for _, size in axes] or [1]

    # -- the mesh axes a collective runs over

    def _coords(self, devices) -> np.ndarray:
        return np.stack(np.unravel_index(np.asarray(devices, dtype=np.int64).ravel(),
                                         self.sizes), axis=-1)

    def _varying(self, devices) -> tuple[str, ...]:
        """The mesh axes along which the devices of one group differ."""
        coords = self._coords(devices)
        return tuple(name for k, (name, _) in enumerate(self.axes)
                     if (coords[:, k] != coords[0, k]).any())

    def _along(self, t: _Tiling, dims: dict[int, int]) -> tuple[str, ...]:
        """Axes of the group of devices at the origin, ``dims[d]`` apart along ``d``."""
        index = tuple(slice(0, dims[d]) if d in dims else 0 for d in range(len(t.counts)))
        return self._varying(t.array[index + (0,)])

    def _bytes(self, shape, counts) -> int:
        return _bytes(_local(shape, counts), self.element_bytes)

    # -- collectives

    def permute(self, shape, a: _Tiling, b: _Tiling) -> Collective:
        """``ReshardWithCollectivePermute``: tile ``i`` of ``a`` moves to ``b``'s device."""
        src, dst = self._coords(a.array), self._coords(b.array)
        moved = (src != dst).any(axis=0)
        names = tuple(name for k, (name, _) in enumerate(self.axes) if moved[k])
        return Collective(COLLECTIVE_PERMUTE, names, self._bytes(shape, a.counts))

    def with_all_to_all(self, shape, a: _Tiling, b: _Tiling, pairs, multiple=True):
        """``ReshardWithAllToAll``: the (source, target) pairs XLA can move in one
        all-to-all together (``TryMultipleSourceTargetDims``: evenly divided, no
        dimension twice), else one pair at a time; a collective-permute if the
        device order still differs from ``b``."""
        if not pairs:
            return ([] if a == b else [self.permute(shape, a, b)]), b
        if multiple:
            chosen, rest, seen = [], [], set()
            for source, target in sorted(pairs, key=lambda p: p[1]):
                if (source in seen or target in seen or shape[source] % a.counts[source]
                        or shape[target] % b.counts[target]):
                    rest.append((source, target))
                else:
                    chosen.append((source, target))
                    seen |= {source, target}
            if len(chosen) >= 2:
                temp, groups = a, {}
                for source, target in chosen:
                    groups[target] = a.counts[source] // a.counts[target]
                    temp = _swap(temp, source, target)
                step = self._grouped(ALL_TO_ALL, self._along(temp, groups),
                                     self._bytes(shape, a.counts), prod(groups.values()))
                out, reached = self.with_all_to_all(shape, temp, b, rest, multiple=False)
                return [step] + out, reached
        source, target = pairs[0]
        group = a.counts[source] // a.counts[target]
        temp = _swap(a, source, target)
        local = _local(shape, a.counts)
        local[target] = -(-shape[target] // temp.counts[target]) * group
        step = self._grouped(ALL_TO_ALL, self._along(temp, {target: group}),
                             _bytes(local, self.element_bytes), group)
        out, reached = self.with_all_to_all(shape, temp, b, list(pairs[1:]))
        return [step] + out, reached

    def gather(self, shape, t: _Tiling, keep: Sequence[int]) -> list[Collective]:
        """``ReplicatePartial`` from ``t``'s counts down to ``keep`` in groups of the
        minor devices: one all-gather per dimension, minor-most first (padded shards
        stay padded), or, for a dimension no bigger than half the devices it is
        gathered over, a dynamic-update-slice into zeros plus an all-reduce."""
        out = []
        local = _local(shape, t.counts)
        for d in reversed(range(len(shape))):
            factor = t.counts[d] // keep[d]
            if factor == 1:
                continue
            names = self._along(t, {d: factor})
            whole = -(-shape[d] // keep[d])
            if whole * 2 <= factor:
                local[d] = whole
                out.append(self._grouped(ALL_REDUCE, names,
                                         _bytes(local, self.element_bytes), factor))
            else:
                local[d] *= factor
                out.append(self._grouped(ALL_GATHER, names,
                                         _bytes(local, self.element_bytes), factor))
        return out

    def _grouped(self, kind: str, names: tuple[str, ...], size: int, group: int
                 ) -> Collective:
        """A collective over groups of ``group`` devices spanning the mesh axes ``names``
        (``Collective.group`` where those hold more devices)."""
        spans = prod(dict(self.axes)[name] for name in names)
        return Collective(kind, names, size, group if group < spans else 0)

    # -- XLA's routes, in ReshardNoCache's order

    def plan(self, shape: tuple[int, ...], a: _Tiling, b: _Tiling, full: bool = True):
        if a == b:
            return [], b
        if a.tiles == 1:
            return [], b  # replicated: every device slices its tile
        if b.tiles > 1 and a.counts == b.counts and a.replication == b.replication:
            return [self.permute(shape, a, b)], b
        pairs = _all_to_all_pairs(a, b)
        if pairs:
            return self.with_all_to_all(shape, a, b, pairs)
        if b.tiles > 1 and a.partial:
            found = self.from_partial_by_slicing(shape, a, b) or self.partial_all_to_all(
                shape, a, b)
            if found:
                return found
        if b.partial:
            found = self.to_partial_by_gathering(shape, a, b) or self.partial_all_to_all(
                shape, a, b)
            if found:
                return found
        if b.tiles > 1:
            found = self.complex(shape, a, b) or self.grouped_on_equal_dims(shape, a, b)
            if found:
                return found
            if not full:
                return None
        return self.gather(shape, a, [1] * len(shape)), b

    def from_partial_by_slicing(self, shape, a: _Tiling, b: _Tiling):
        """``ReshardFromPartialReplicateWithDynamicSlice``: slice the replicas
        (free), then a collective-permute if the devices are not ``b``'s."""
        compatible = _compatible(a, b)
        if compatible is None:
            return None
        out = self.padding_spread(shape, a, compatible)
        return out + ([] if compatible == b else [self.permute(shape, compatible, b)]), b

    def to_partial_by_gathering(self, shape, a: _Tiling, b: _Tiling):
        """``ReshardToPartialReplicateWithAllGather``: a collective-permute onto the
        devices that gather into ``b`` (if needed), then all-gathers in groups."""
        compatible = _compatible(b, a)
        if compatible is None:
            return None
        out = [] if compatible == a else [self.permute(shape, a, compatible)]
        out += self.padding_gathered(shape, compatible, b)
        return out + self.gather(shape, compatible, b.counts), b

    def padding_spread(self, shape, a: _Tiling, b: _Tiling) -> list[Collective]:
        """``PadFromPartialReplicateShape``: a dimension ``b`` cuts into more shards
        whose padded extent is larger than ``a``'s (30 elements: 15 per shard of 2, 8
        per shard of 4) moves each ``a`` shard's window right, ``i`` elements per
        shard more, before the slicing: a compact halo exchange among ``a``'s shards."""
        out = []
        local = _local(shape, a.counts)
        for d, (have, want) in enumerate(zip(a.counts, b.counts)):
            if want <= have or have == 1:
                continue
            size = local[d]
            per_shard = -(-shape[d] // want) * want // have
            if size >= per_shard:
                continue
            grown = per_shard - size
            halos = exchange_halo_compact(shape[d], size, have, lambda i, g=grown: -g * i,
                                          lambda i, g=grown: g * (i + 1))
            out += self.halos(local, a, d, halos)
            local[d] = per_shard
        return out

    def padding_gathered(self, shape, a: _Tiling, b: _Tiling) -> list[Collective]:
        """``TileToPartialReplicateHaloExchange``: a dimension gathered into fewer
        shards, where the ``a`` shards of one ``b`` shard span more elements than it
        holds (4 elements over 8 shards gathered into 4: the padding of ``a`` does not
        line up with ``b``'s tiles), moves shard ``i``'s data left by the surplus of
        the ``i // factor`` groups before it, before the gather: a compact halo
        exchange among ``a``'s shards."""
        out = []
        local = _local(shape, a.counts)
        for d, (have, want) in enumerate(zip(a.counts, b.counts)):
            if want == have or want == 1:
                continue
            spanned = local[d] * have // want
            surplus = spanned - -(-shape[d] // want)
            if surplus <= 0:
                continue
            factor = have // want
            halos = exchange_halo_compact(shape[d], local[d], have,
                                          lambda i, s=surplus, f=factor: s * (i // f),
                                          lambda i, s=surplus, f=factor: -s * (i // f))
            out += self.halos(local, a, d, halos)
        return out

    def halos(self, local: Sequence[int], t: _Tiling, dim: int, halos: Sequence[int]
              ) -> list[Collective]:
        """A collective-permute per halo of ``halos`` (elements along ``dim``) of the
        ``local`` shards of ``t``, among the devices along ``dim``."""
        names = self._along(t, {dim: t.counts[dim]})
        piece = list(local)
        out = []
        for halo in halos:
            piece[dim] = halo
            out.append(Collective(COLLECTIVE_PERMUTE, names, _bytes(piece, self.element_bytes)))
        return out

    def partial_all_to_all(self, shape, a: _Tiling, b: _Tiling):
        """``ReshardPartialReplicateWithAllToAll``: ``[1, X, .., R] last_tile_dim_replicate``
        and ``[X, .., R]`` on the same devices, one all-to-all apart."""
        partial, tiled = (a, b) if a.partial else (b, a)
        if not partial.partial or tiled.replication > 1 or tiled.tiles == 1:
            return None
        rank = len(tiled.counts)
        replicas = partial.replication
        shifted = partial.counts + (replicas,)
        if shifted[0] != 1:
            return None
        dim = -1
        for i in reversed(range(rank)):
            if tiled.counts[i] > 1 and dim == -1:
                if tiled.counts[i] != replicas:
                    return None
                dim = i
            if tiled.counts[i] != shifted[i + 1]:
                return None
        if dim == -1 or not np.array_equal(partial.array.ravel(), tiled.array.ravel()):
            return None
        counts = list(tiled.counts)
        counts[dim] = 1
        middle = _from_array(tiled.array.reshape(counts + [replicas]))
        if partial is a:
            pairs = _all_to_all_pairs(a, middle)
            if not pairs:
                return None
            first, _ = self.with_all_to_all(shape, a, middle, pairs)
            rest, reached = self.plan(shape, middle, b)
            return first + rest, reached
        first, reached = self.plan(shape, a, middle)
        pairs = _all_to_all_pairs(reached, b)
        if not pairs:
            return None
        rest, reached = self.with_all_to_all(shape, reached, b, pairs)
        return first + rest, reached

    def complex(self, shape, a: _Tiling, b: _Tiling):
        """``TryComplexReshardHandling``: a merge or split of two dimensions (done on
        the tensor with the dimension split in two), else replicating the one
        dimension that makes up ``b``'s replication, else turning ``a``'s replicas
        into a dimension ``b`` shards; each continued without full replication."""
        match = self.merge_or_split(shape, a, b)
        if match is not None:
            i, before, after = match
            split_shape = self.split_shape(shape, a, i, before)
            found = self.plan(split_shape, before, after, full=False)
            if found is None:
                return None
            out, reached = found
            array = reached.array
            merged = _from_array(array.reshape(
                array.shape[:i] + (array.shape[i] * array.shape[i + 1],) + array.shape[i + 2:]))
            if merged != b:
                found = self.plan(shape, merged, b, full=False)
                if found is None:
                    return None
                out = out + found[0]
            return out, b
        if b.partial:
            for i, count in enumerate(a.counts):
                if count == 1 or count * a.replication != b.replication:
                    continue
                middle = _replicate_dims(a, [i])
                first, reached = self.plan(shape, a, middle)
                found = self.plan(shape, reached, b, full=False)
                return None if found is None else (first + found[0], b)
            return None
        if not a.partial:
            return None
        for i, (have, want) in enumerate(zip(a.counts, b.counts)):
            if have != want and have == 1 and want % a.replication == 0:
                array = np.swapaxes(a.array, i, len(a.counts))
                first, reached = self.plan(shape, a, _from_array(array))
                found = self.plan(shape, reached, b, full=False)
                return None if found is None else (first + found[0], b)
        return None

    @staticmethod
    def merge_or_split(shape, a: _Tiling, b: _Tiling):
        """XLA's ``PatternMatchMergeOrSplitSharding``: ``[X, Y] <-> [X*Y, 1]`` (a
        dimension whose counts divide each other, padded evenly, paired with one
        sharded on one side only), else ``[X*Y] -> [X]``; with the same replication.
        Returns (the dimension split, ``a`` and ``b`` with it split in two)."""
        if a.replication != b.replication:
            return None
        one_sided, nested = [], []
        for i, (x, y) in enumerate(zip(a.counts, b.counts)):
            low, high = min(x, y), max(x, y)
            if x == y:
                continue
            if low == 1:
                one_sided.append(i)
            elif high % low == 0 and -(-shape[i] // low) * low % high == 0:
                nested.append(i)
        choice = None
        for i in nested:
            for j in one_sided:
                if a.counts[i] * a.counts[j] == b.counts[i] * b.counts[j]:
                    choice = choice or (i, min(a.counts[i], b.counts[i]))
        for i in nested:
            if choice is None and a.counts[i] > b.counts[i]:
                choice = (i, b.counts[i])
        if choice is None:
            return None
        i, size = choice

        def split(t: _Tiling) -> _Tiling:
            array = t.array
            return _from_array(array.reshape(
                array.shape[:i] + (size, t.counts[i] // size) + array.shape[i + 1:]))

        return i, split(a), split(b)

    @staticmethod
    def split_shape(shape, a: _Tiling, i: int, before: _Tiling) -> tuple[int, ...]:
        """``SplitReshapeHelper``'s base shape: dimension ``i`` in two, the minor part
        the local shard times the devices ``before`` splits it over."""
        minor = -(-shape[i] // a.counts[i]) * before.counts[i + 1]
        return tuple(shape[:i]) + (shape[i] // minor, minor) + tuple(shape[i + 1:])

    def grouped_on_equal_dims(self, shape, a: _Tiling, b: _Tiling):
        """XLA groups the devices on the dimensions both shardings split the same way
        (``GroupShardingOnDims``) and reshards inside each group its shard of those
        dimensions; when ``b``'s groups are not ``a``'s (``AlignGroupsWith``), each
        group reaches ``b``'s layout on its own devices and a collective-permute
        follows."""
        equal = [d for d, (x, y) in enumerate(zip(a.counts, b.counts)) if x != 1 and x == y]
        if not equal:
            return None
        rank = len(a.counts)
        ungrouped = np.empty_like(b.array)
        aligned = True
        for index in np.ndindex(*[a.counts[d] for d in equal]):
            at = dict(zip(equal, index))
            where = tuple(slice(at[d], at[d] + 1) if d in at else slice(None)
                          for d in range(rank))
            group_a, group_b = a.array[where], b.array[where]
            aligned &= set(group_a.ravel().tolist()) == set(group_b.ravel().tolist())
            ungrouped[where] = group_a.reshape(group_b.shape)
        first = tuple(slice(0, 1) if d in equal else slice(None) for d in range(rank))
        inner_a = _from_array(a.array[first])
        inner_b = _from_array(b.array[first] if aligned else a.array[first].reshape(
            b.array[first].shape))
        inner_shape = tuple(-(-n // a.counts[d]) if d in equal else n
                            for d, n in enumerate(shape))
        out, _ = self.plan(inner_shape, inner_a, inner_b)
        if not aligned and _from_array(ungrouped) != b:
            out = out + [self.permute(shape, _from_array(ungrouped), b)]
        return out, b


def _replicate_dims(t: _Tiling, dims: Sequence[int]) -> _Tiling:
    """XLA's ``PartiallyReplicateTiledShardingOnDims``: ``dims``' devices join the
    replicas (as their major part)."""
    rank = len(t.counts)
    moved = [d for d in range(rank) if d in dims]
    kept = [d for d in range(rank) if d not in dims]
    array = t.array.transpose(kept + moved + [rank])
    counts = [1 if d in dims else n for d, n in enumerate(t.counts)]
    return _from_array(array.reshape(counts + [-1]))


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

    Follows ``PartitionedHlo::ReshardNoCache`` (cost-model.md, the module
    docstring): permutes, all-to-alls, slices of partially replicated shards,
    gathers into partially replicated ones, ``TryComplexReshardHandling``'s
    routes and grouping on equally split dimensions, else replicate and
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
    a, b = _tiling(src, rank, axes), _tiling(dst, rank, axes)
    return _Planner(element_bytes, axes).plan(shape, a, b)[0]


def reshard_tensor(src: Tensor, dst: TensorSharding | None, mesh=None) -> list[Collective]:
    """``reshard_collectives`` for a cost-model tensor (its shape, type and sharding)."""
    return reshard_collectives(src.shape, src.element_bytes, src.sharding, dst, mesh,
                               dtype=src.dtype)


def all_reduce(result: Tensor, over: Sequence[AxisRef], *, shaped: bool = True) -> Collective:
    """The all-reduce of ``result``'s partial sums over ``over`` (buffer: the result
    shard without the axes reduced over, in the type XLA reduces it in).

    A result sharded over axes it is reduced over is all-reduced unsliced and
    then sliced: on a platform that forms reduce-scatters from that (XLA:TPU),
    one reduce-scatter of the same buffer (its full operand), where it forms one
    over that many devices and (``shaped``) for the result shard's shape
    (``PlatformRules.scatters_over``)."""
    axes = dim_axes(result.sharding, len(result.shape))
    kept = [[axis for axis in dim if axis not in over] for dim in axes]
    rules = active_rules()
    scattered = [k for k, (keep, dim) in enumerate(zip(kept, axes)) if len(keep) != len(dim)]
    shard = shard_shape(result.shape, axes) if shaped else None
    kind = REDUCE_SCATTER if scattered and rules.scatters_over(
        size_product(over), shard, scattered) else ALL_REDUCE
    moved = collective_element_bytes(result.element_bytes, result.dtype, rules)
    padded = _padded_scatter(result, over, rules) if kind == REDUCE_SCATTER and shaped else None
    if padded is not None:  # the all-reduce runs over every device's padded shard
        _, rows, row_elements = padded
        return Collective(kind, axis_names(over), size_product(over) * rows * row_elements * moved)
    return Collective(kind, axis_names(over), shard_bytes(result.shape, moved, kept))


def reduce_scatter_halo(result: Tensor, over: Sequence[AxisRef]) -> Collective | None:
    """The collective-permute that completes ``all_reduce``'s reduce-scatter where the
    platform pads each device's shard (``PlatformRules.reduce_scatter_rows``): device i
    computed rows [i S', (i + 1) S') of the padded buffer, its declared shard starts at
    i S, so each device passes the last (n - 1)(S' - S) rows it computed to the next one
    (one permute of that many rows, the largest overhang); None where nothing moves."""
    rules = active_rules()
    if all_reduce(result, over).kind != REDUCE_SCATTER:
        return None
    padded = _padded_scatter(result, over, rules)
    if padded is None:
        return None
    declared, rows, row_elements = padded
    moved = collective_element_bytes(result.element_bytes, result.dtype, rules)
    return Collective(COLLECTIVE_PERMUTE, axis_names(over),
                      (size_product(over) - 1) * (rows - declared) * row_elements * moved)


def _padded_scatter(result: Tensor, over: Sequence[AxisRef], rules: PlatformRules
                    ) -> tuple[int, int, int] | None:
    """(declared rows per device, rows it computes, elements per row) of a reduce-scatter
    of ``result`` over ``over`` that the platform pads, scattered on one dimension that
    its fusion's layout (scattered dimensions major) makes the rows: every other
    dimension but the minor one of one element per device. None where it pads nothing,
    or where the overhang would reach past the next device (not measured)."""
    axes = dim_axes(result.sharding, len(result.shape))
    shard = shard_shape(result.shape, axes)
    scattered = [k for k, dim in enumerate(axes) if any(a in over for a in dim)]
    if len(scattered) != 1 or len(shard) < 2:
        return None
    dim = scattered[0]
    others = [k for k in range(len(shard)) if k != dim]
    if any(shard[k] != 1 for k in others[:-1]):
        return None
    devices = size_product(over)
    rows = rules.reduce_scatter_rows(shard[dim], devices, result.element_bytes)
    if rows == shard[dim] or (devices - 1) * (rows - shard[dim]) > shard[dim]:
        return None
    return shard[dim], rows, shard[others[-1]]


def dot_partial_sums(result: Tensor, reduced: Sequence[Sequence[AxisRef]], *,
                     shaped: bool = True, devices: int | None = None
                     ) -> list[tuple[tuple[AxisRef, ...], Collective]]:
    """The collectives that sum a dot's partial sums into ``result``'s sharding;
    ``reduced`` holds the axes of each contracting dimension it sums over.

    XLA's dot partitioner reduces the partial sums over the reduced axes the result
    is sharded over first (an all-reduce of the buffer unsliced over them, then
    sliced, or the reduce-scatter formed from that), then all-reduces that slice
    over the other reduced axes: an FSDP weight gradient summed over ``fsdp`` and
    ``data`` moves its whole buffer over ``fsdp`` and only its shard over ``data``.
    Those other axes it sums one contracting dimension at a time
    (``AllReduceAlongShardingDims`` per sharded dimension), each time the whole
    slice: a contraction over heads on one axis and head features on another is
    two all-reduces. A result sliced on several dimensions is all-reduced whole
    once per dimension, over its reduced axes, minor-most dimension first
    (XLA:CPU; one reduce-scatter where the platform forms them). Each collective
    comes with the axes it reduces over; ``shaped`` as ``all_reduce``'s (a caller
    that windows the reduce-scatter first asks without it).

    A result sharded over every reduced axis and replicated over a multiple of
    their devices (``devices``: the mesh's count) is computed otherwise
    (``PartitionDotGroupOnContracting``: the output grouped on its replicated
    devices): each group of the contraction computes its tiles on the replicas,
    all-reduces that shard over the reduced axes, and a collective-permute moves
    the tiles to the result's devices (an FSDP projection's activations sharded
    by batch over the axis its weights are sharded by)."""
    axes = dim_axes(result.sharding, len(result.shape))
    over = [axis for dim in reduced for axis in dim]
    sliced = tuple(axis for axis in over if any(axis in dim for dim in axes))
    rest = [step for step in (tuple(a for a in dim if a not in sliced) for dim in reduced)
            if step]
    tiles = size_product(tuple(axis for dim in axes for axis in dim))
    if (sliced and not rest and devices and devices % tiles == 0
            and (devices // tiles) % size_product(over) == 0):
        moved = collective_element_bytes(result.element_bytes, result.dtype)
        shard = shard_bytes(result.shape, moved, axes)
        names = axis_names(over)
        return [(tuple(over), Collective(ALL_REDUCE, names, shard)),
                (tuple(over), Collective(COLLECTIVE_PERMUTE, names, shard))]
    out = []
    if sliced:
        whole = all_reduce(result, sliced, shaped=shaped)
        per_dim = [tuple(a for a in dim if a in sliced) for dim in reversed(axes)]
        per_dim = [step for step in per_dim if step]
        if whole.kind == ALL_REDUCE and len(per_dim) > 1:
            # Sliced on several dimensions: one all-reduce of the whole buffer per
            # dimension, minor-most first (as XLA:CPU compiles it).
            out += [(step, replace(whole, axes=axis_names(step))) for step in per_dim]
        else:
            out.append((sliced, whole))
    return out + [(step, all_reduce(result, step)) for step in rest]
