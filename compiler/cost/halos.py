"""Halo exchanges: the collective-permutes XLA partitions windowed reads of a sharded
dimension with (slices, pads, reverses and rotations along it).

XLA's partitioner reads a slice, a pad or a window of a dimension sharded in both
the operand and the result as a window over the operand
(``PartitionedHlo::ReshardAsWindowedInput``): a slice is a window of size one whose
stride is the slice's and whose padding is ``-start`` low and ``limit - size``
high, a pad is a window of size one padded by the edge padding (interior padding
dilates the base). Each result shard ``i`` reads the operand's elements
``[start(i), limit(i))``; what lies outside its own operand shard comes from its
neighbours, one collective-permute per neighbour distance on each side
(``ExchangeHalo``: the left halo of shard ``i`` is ``shard * i + padding_low -
start(i)``, the right ``limit(i) - shard * (i + 1) - padding_low``; the largest over
the shards sizes every permute, less what no shard reads; a permute from as far
as the last shard has no pair and is no collective). A halo reaching past a
neighbour's shard when the dimension is read almost whole, or one of more than
twice the windowed shard read compactly, is beyond the neighbours: XLA then
reshards the operand with every windowed dimension replicated (all-gathers) and
pads and slices locally (``BEYOND`` here).

``jnp.roll`` concatenates two slices of one value (``x[n-k:]``, ``x[:n-k]``);
XLA rewrites that into a rotation (``_SPMDInternalOp_RotateRight``), partitioned
as pieces moved ``ceil((k - done) / shard)`` shards right, each a
collective-permute unless it stays on its device, twice where the last shard
holds padding. A reverse of a sharded dimension moves every shard to its mirror
(one collective-permute of the shard), after a left halo of the padding where
the dimension is uneven (``HaloExchangeToPadOnLeft``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from jaxlib.mlir import ir
from jaxlib.mlir.dialects import stablehlo

from shardc.compiler.cost.exchange import (
    Offsets,
    c_div,
    ceil_of_ratio,
    exchange_halo,
    exchange_halo_compact,
)
from shardc.compiler.cost.op_comm import CONVOLUTION, OpCommunication
from shardc.compiler.cost.reshard import (
    ALL_REDUCE,
    COLLECTIVE_PERMUTE,
    Collective,
    collective_element_bytes,
    dim_axes,
    reshard_tensor,
)
from shardc.compiler.sharding.axes import size_product
from shardc.compiler.sharding.tensor import DimSharding, Tensor, TensorSharding

# ``windowed_halos``' answer for a halo beyond the neighbours of a shard.
BEYOND = "beyond the neighbours"


@dataclass(frozen=True)
class WindowDim:
    """One dimension of a window as XLA's ``WindowDimension`` holds it."""

    size: int = 1
    stride: int = 1
    padding_low: int = 0
    padding_high: int = 0
    base_dilation: int = 1
    window_dilation: int = 1


def _trimmed(base: int, shard: int, count: int, windows: int, full: int, window: WindowDim
             ) -> tuple[int, int, int] | None:
    """The shards of a read with fewer windows than shards that exchange halos, as
    ``ReshardAsWindowedInput`` trims them: ``(count, shard size, left padding)`` of the
    shards left (those with useful input or output, the first ones, and the middle
    ones without output skipped), each shard cut to its useful input where that is
    smaller; None where one shard is left (it reads its own data)."""
    padding_left = window.padding_low
    useful = ceil_of_ratio(base + window.padding_high, shard)
    if useful < count:
        count = max(useful, windows)
        if count == 1:
            return None
        if window.padding_high < 0 and full - window.padding_low < shard:
            shard = full - window.padding_low
    middle = c_div(-padding_left, shard) - windows
    if middle > 0:
        count -= middle
        padding_left += middle * shard
        if -padding_left > shard * (count - 1):
            skip = -padding_left - shard * (count - 1)
            shard -= skip
            padding_left += skip * count
            if full < shard:
                padding_left += (shard - full) * (count - 1)
                shard = full
    return count, shard, padding_left


@dataclass(frozen=True)
class _Reads:
    """What each shard of a windowed dimension reads: ``left(i)`` / ``right(i)`` halo
    elements beyond its own shard of ``shard`` (negative: that much of it unread),
    ``windowed`` the most any shard reads, over ``count`` shards of the ``exchanged``
    elements (fewer than the dimension's where XLA trims shards without output)."""

    count: int
    shard: int
    exchanged: int
    padding_left: int
    left: Offsets
    right: Offsets
    windowed: int

    def compact(self) -> bool:
        """Whether XLA reads the window compactly (``ExchangeHaloCompact``): each shard
        reads as much as its window from far beyond its neighbours."""
        left, right, count = self.left, self.right, self.count
        return (self.padding_left == left(0)
                and self.shard + max(left(i) + right(i) for i in range(count)) == self.windowed
                and max(max(left(i), right(i)) for i in range(count)) > 2 * self.windowed)


def _window_reads(base: int, count: int, window: WindowDim) -> _Reads | int | None:
    """``_Reads`` of a window over a dimension of ``base`` elements split in ``count``
    shards; the shard size where no shard reads beyond its own; None where XLA
    partitions the read otherwise (strides across dilations, shards without output
    beside dilations)."""
    shard = ceil_of_ratio(base, count)
    dilated = 1 + (window.size - 1) * window.window_dilation
    full = (1 + (base - 1) * window.base_dilation + window.padding_high
            + window.padding_low)
    if full < dilated:
        return None
    windows = c_div(full - dilated, window.stride) + 1
    per_shard = ceil_of_ratio(windows, count)
    dilation, stride = window.base_dilation, window.stride
    padding_left = c_div(window.padding_low, dilation)
    low = window.padding_low - padding_left * dilation
    exchanged = base
    if windows < count:
        if dilation != 1 or window.window_dilation != 1:
            return None  # shards without output beside dilations: not modelled
        trimmed = _trimmed(base, shard, count, windows, full, window)
        if trimmed is None:
            return shard
        count, shard, padding_left = trimmed
        exchanged = shard * count
    if stride != 1 and (stride * per_shard) % dilation:
        return None
    span = stride * (per_shard - 1) + dilated

    def start(i: int) -> int:
        return c_div(stride * per_shard * i + dilation - 1 - low, dilation)

    def limit(i: int) -> int:
        return c_div(stride * per_shard * i + span + dilation - 1 - low, dilation)

    def left(i: int) -> int:
        return shard * i + padding_left - start(i)

    def right(i: int) -> int:
        return limit(i) - (shard * i + shard + padding_left)

    windowed = max(limit(i) - start(i) for i in range(count))
    return _Reads(count, shard, exchanged, padding_left, left, right, windowed)


def windowed_halos(base: int, count: int, window: WindowDim
                   ) -> tuple[list[int], int] | str | None:
    """The collective-permutes (elements along the dimension) that read a window over a
    dimension of ``base`` elements split in ``count`` shards, and the windowed shard's
    size after them (``ReshardAsWindowedInput`` then ``ExchangeHaloAndGetValidData``);
    ``BEYOND`` where a halo is beyond the neighbours; None where XLA partitions the
    read otherwise (strides across dilations, shards without output beside dilations)."""
    reads = _window_reads(base, count, window)
    if reads is None or isinstance(reads, int):
        return None if reads is None else ([], reads)
    count, shard, left, right = reads.count, reads.shard, reads.left, reads.right
    windowed = reads.windowed
    if reads.compact():
        if windowed * 2 >= count * shard:
            return BEYOND
        return exchange_halo_compact(reads.exchanged, shard, count, left, right), windowed
    halos = exchange_halo(shard, count, left, right)
    return BEYOND if halos is None else (halos, windowed)


def exchanged_extent(base: int, count: int, window: WindowDim) -> int | None:
    """The elements along the dimension of the array ``ExchangeHalo`` concatenates for
    a window over a dimension of ``base`` elements in ``count`` shards: the left
    halos, the part of the shard some shard reads, the right halos. The windowed
    op's result is a dynamic-slice of it, at each shard's offset, that its readers
    fuse. None where no halo is exchanged or XLA reads the window otherwise."""
    found = windowed_halos(base, count, window)
    if not isinstance(found, tuple) or not found[0]:
        return None
    reads = _window_reads(base, count, window)
    if reads.compact():
        return None  # ``exchange_halo_compact``'s pieces: not this layout
    shard, count, left, right = reads.shard, reads.count, reads.left, reads.right
    left_bound = -max(left(i) for i in range(count))
    right_bound = shard + max(right(i) for i in range(count))
    middle = max(0, min(shard, right_bound) - max(0, left_bound))
    return sum(found[0]) + middle


def _shard_sizes(tensor: Tensor, counts: list[int]) -> list[int]:
    return [ceil_of_ratio(size, count) for size, count in zip(tensor.shape, counts)]


def _counts(axes_of) -> list[int]:
    return [size_product(axes) for axes in axes_of]


def _permutes(tensor: Tensor, local: list[int], dim: int, halos: list[int],
              names: tuple[str, ...]) -> list[Collective]:
    element_bytes = collective_element_bytes(tensor.element_bytes, tensor.dtype)
    rest = 1
    for d, size in enumerate(local):
        if d != dim:
            rest *= size
    return [Collective(COLLECTIVE_PERMUTE, names, halo * rest * element_bytes)
            for halo in halos]


def _names(axes) -> tuple[str, ...]:
    return tuple(str(a).strip('"') for a in axes)


def window_halo_collectives(operand: Tensor, result: Tensor, windows: list[WindowDim],
                            src: list | None = None) -> list[Collective] | None:
    """The halo collective-permutes of reading ``windows`` (one per dimension) of
    ``operand`` (sharded as ``src`` per dimension when the op reshards it first,
    else as it is) into ``result``'s sharding: on every dimension sharded in both
    (an operand unsharded there is padded and sliced locally), dimension by
    dimension, each later one exchanging the windowed shards of the earlier ones.
    Where one dimension's halo is beyond the neighbours, only the all-gathers of
    every windowed dimension (the permutes of the dimensions before it are dead).
    None where a dimension's exchange is not modelled."""
    rank = len(operand.shape)
    if operand.sharding is None or result.sharding is None:
        return []
    dst = dim_axes(result.sharding, rank)
    if src is None:
        src = dim_axes(operand.sharding, rank)
    counts = _counts(dst)
    local = _shard_sizes(operand, counts)
    out: list[Collective] = []
    for d, window in enumerate(windows):
        if counts[d] <= 1 or not src[d] or window == WindowDim():
            continue
        found = windowed_halos(operand.shape[d], counts[d], window)
        if found is None:
            return None
        if found == BEYOND:
            return _windowed_dims_replicated(operand, src, windows)
        halos, local[d] = found
        out.extend(_permutes(operand, local, d, halos, _names(dst[d])))
    return out


def exchanged_window_bytes(operand: Tensor, result: Tensor, windows: list[WindowDim],
                           src: list | None = None) -> int | None:
    """Per-device bytes of the array the last halo exchange of reading ``windows`` of
    ``operand`` into ``result``'s sharding concatenates (``exchanged_extent`` along its
    dimension, the windowed shard along the dimensions exchanged before it, the
    operand's shard elsewhere): what the windowed op's readers read, a slice of it
    each. None where no dimension exchanges a halo (``window_halo_collectives``'
    arguments)."""
    rank = len(operand.shape)
    if operand.sharding is None or result.sharding is None:
        return None
    dst = dim_axes(result.sharding, rank)
    if src is None:
        src = dim_axes(operand.sharding, rank)
    counts = _counts(dst)
    local = _shard_sizes(operand, counts)
    found = None
    for d, window in enumerate(windows):
        if counts[d] <= 1 or not src[d] or window == WindowDim():
            continue
        halos = windowed_halos(operand.shape[d], counts[d], window)
        if not isinstance(halos, tuple):
            return None
        extent = exchanged_extent(operand.shape[d], counts[d], window)
        if extent is not None:
            shape = list(local)
            shape[d] = extent
            found = shape
        local[d] = halos[1]
    if found is None:
        return None
    total = operand.element_bytes
    for size in found:
        total *= size
    return total


def _windowed_dims_replicated(operand: Tensor, src: list, windows: list[WindowDim]
                              ) -> list[Collective]:
    """The reshard of ``operand`` (sharded ``src`` per dimension) to every dimension
    with a window replicated, the rest as they are."""
    mesh = operand.sharding.mesh
    before = TensorSharding(mesh, tuple(DimSharding(tuple(a), True) for a in src))
    after = TensorSharding(mesh, tuple(
        DimSharding(() if window != WindowDim() else tuple(a), True)
        for a, window in zip(src, windows)))
    return reshard_tensor(replace(operand, sharding=before), after)


def _ints(op: ir.Operation, name: str) -> list[int]:
    return list(ir.DenseI64ArrayAttr(op.attributes[name]))


def slice_windows(op: ir.Operation, shape: tuple[int, ...]) -> list[WindowDim]:
    """A ``stablehlo.slice`` as XLA's windowed read (``HandleSlice``)."""
    starts, limits = _ints(op, "start_indices"), _ints(op, "limit_indices")
    strides = _ints(op, "strides")
    return [WindowDim(stride=s, padding_low=-b, padding_high=e - n)
            if (b, e, s) != (0, n, 1) else WindowDim()
            for b, e, s, n in zip(starts, limits, strides, shape)]


def pad_windows(op: ir.Operation) -> list[WindowDim]:
    """A ``stablehlo.pad`` as XLA's windowed read: edge padding, interior padding as
    base dilation."""
    lows, highs = _ints(op, "edge_padding_low"), _ints(op, "edge_padding_high")
    interiors = _ints(op, "interior_padding")
    return [WindowDim(padding_low=lo, padding_high=hi, base_dilation=inner + 1)
            for lo, hi, inner in zip(lows, highs, interiors)]


def reverse_collectives(op: ir.Operation, operand: Tensor, result: Tensor) -> list[Collective]:
    """A reverse of dimensions sharded in its result: the halo padding uneven ones on the
    left, then every shard to its mirror device (one collective-permute of the shard)."""
    if result.sharding is None or operand.sharding is None:
        return []
    rank = len(result.shape)
    dst = dim_axes(result.sharding, rank)
    counts = _counts(dst)
    dims = [d for d in _ints(op, "dimensions") if counts[d] > 1]
    if not dims:
        return []
    windows = [WindowDim(padding_low=ceil_of_ratio(n, c) * c - n) if d in dims else WindowDim()
               for d, (n, c) in enumerate(zip(result.shape, counts))]
    out = window_halo_collectives(operand, result, windows) or []
    local = _shard_sizes(result, counts)
    names = tuple(name for d in dims for name in _names(dst[d]))
    return out + _permutes(result, local, -1, [1], names)


def rotation(op: ir.Operation) -> tuple[ir.Value, int, int] | None:
    """``(x, dimension, amount)`` where ``op`` concatenates ``x[n-k:]`` and ``x[:n-k]``
    along one dimension (``jnp.roll``): XLA's rotate-right by ``k``; else None."""
    if op.name != "stablehlo.concatenate" or len(op.operands) != 2:
        return None
    dim = ir.IntegerAttr(op.attributes["dimension"]).value
    slices = []
    for operand in op.operands:
        owner = getattr(operand.owner, "operation", operand.owner)
        if not isinstance(owner, ir.Operation) or owner.name != "stablehlo.slice":
            return None
        slices.append(owner)
    source = slices[0].operands[0]
    if slices[1].operands[0] != source:
        return None
    shape = list(ir.RankedTensorType(source.type).shape)
    if list(ir.RankedTensorType(op.result.type).shape) != shape:
        return None
    (b0, e0, s0), (b1, e1, s1) = ((_ints(s, "start_indices"), _ints(s, "limit_indices"),
                                  _ints(s, "strides")) for s in slices)
    for d, n in enumerate(shape):
        if s0[d] != 1 or s1[d] != 1:
            return None
        if d != dim and (b0[d], e0[d], b1[d], e1[d]) != (0, n, 0, n):
            return None
    amount = e0[dim] - b0[dim]
    if (e0[dim], b1[dim], e1[dim]) != (shape[dim], 0, shape[dim] - amount):
        return None
    return source, dim, amount


def rotate_collectives(result: Tensor, dim: int, amount: int) -> list[Collective]:
    """The collective-permutes of rotating ``result``'s sharded ``dim`` right by
    ``amount`` (``HandleCustomCallSPMDInternal_RotateRight``)."""
    if result.sharding is None:
        return []
    rank = len(result.shape)
    dst = dim_axes(result.sharding, rank)
    counts = _counts(dst)
    if counts[dim] <= 1:
        return []
    local = _shard_sizes(result, counts)
    full, shard = result.shape[dim], local[dim]
    shards = ceil_of_ratio(full, shard)
    padding = shards * shard - full
    amount %= full
    if amount == 0:
        return []

    def pieces(rotate: int) -> list[int]:
        done, moved = 0, []
        while done < shard:
            distance = ceil_of_ratio(rotate - done, shard)
            offset = distance * shard - rotate + done
            size = min(shard - offset, shard - done)
            done += size
            if distance % shards:  # a permute onto the device itself is no collective
                moved.append(size)
        return moved

    halos = pieces(amount)
    if padding:
        halos += pieces((amount + padding) % (shard * shards))
    return _permutes(result, local, dim, halos, _names(dst[dim]))


def rotated_slice(op: ir.Operation) -> bool:
    """Whether ``op`` is a slice read only by rotations (``rotation``): XLA rewrites
    those and never partitions the slice itself."""
    if op.name != "stablehlo.slice":
        return False
    users = [use.owner for use in op.result.uses]
    return bool(users) and all(rotation(getattr(u, "operation", u)) is not None
                               for u in users)


# Ops whose halos their attributes and producers decide (never memoised by type and
# sharding alone).
HALO_OPS = frozenset({"stablehlo.slice", "stablehlo.pad", "stablehlo.reverse",
                      "stablehlo.concatenate", CONVOLUTION})


def _ints_or(op: ir.Operation, name: str, count: int, default: int) -> list[int]:
    if name not in op.attributes:
        return [default] * count
    return list(ir.DenseI64ArrayAttr(op.attributes[name]))


def _conv_windows(op: ir.Operation, kernel: Tensor):
    """``(dimension numbers, [(input dim, kernel dim, output dim, WindowDim)])``: the
    window of each spatial dimension of a convolution."""
    dims = stablehlo.ConvDimensionNumbers(op.attributes["dimension_numbers"])
    spatial = list(zip(dims.input_spatial_dimensions, dims.kernel_spatial_dimensions,
                       dims.output_spatial_dimensions))
    n = len(spatial)
    strides = _ints_or(op, "window_strides", n, 1)
    lhs_dilation = _ints_or(op, "lhs_dilation", n, 1)
    rhs_dilation = _ints_or(op, "rhs_dilation", n, 1)
    padding = ([int(v) for v in ir.DenseIntElementsAttr(op.attributes["padding"])]
               if "padding" in op.attributes else [0] * (2 * n))
    windows = [(i, k, o, WindowDim(size=kernel.shape[k], stride=strides[s],
                                   padding_low=padding[2 * s], padding_high=padding[2 * s + 1],
                                   base_dilation=lhs_dilation[s],
                                   window_dilation=rhs_dilation[s]))
               for s, (i, k, o) in enumerate(spatial)]
    return dims, windows


def _kernel_sharded_halos(base: int, count: int, window: WindowDim, outputs: int
                          ) -> list[int] | None:
    """The halos of an input spatial dimension read by a kernel sharded alike along it
    (a filter gradient: the kernel is the output gradient): kernel shard ``i`` holds
    window taps ``[k i, k (i + 1))`` and reads the input rows from its first tap of the
    first output to its last tap of the last one."""
    if window.base_dilation != 1:
        return None
    shard, taps = ceil_of_ratio(base, count), ceil_of_ratio(window.size, count)
    low, dilation, stride = window.padding_low, window.window_dilation, window.stride

    def left(i: int) -> int:
        return shard * i - (taps * i * dilation - low)

    def right(i: int) -> int:
        last = (outputs - 1) * stride + (taps * (i + 1) - 1) * dilation - low + 1
        return last - shard * (i + 1)

    return exchange_halo(shard, count, left, right)


def conv_collectives(op: ir.Operation, lhs: Tensor, kernel: Tensor, result: Tensor
                     ) -> tuple[list[Collective], tuple[str, ...]]:
    """The halo collective-permutes of a convolution's input along spatial dimensions
    sharded in the input and in its output (a window per output shard, as a
    reduce_window's) or in the kernel (``_kernel_sharded_halos``), and the mesh axes
    of the latter (their partial sums are all-reduced on their own)."""
    if lhs.sharding is None or result.sharding is None or kernel.sharding is None:
        return [], ()
    _, windows = _conv_windows(op, kernel)
    src = dim_axes(lhs.sharding, len(lhs.shape))
    out_counts = _counts(dim_axes(result.sharding, len(result.shape)))
    out_axes = dim_axes(result.sharding, len(result.shape))
    kernel_axes = dim_axes(kernel.sharding, len(kernel.shape))
    local = _shard_sizes(lhs, _counts(src))
    found: list[Collective] = []
    spatial_axes: list[str] = []
    for i, k, o, window in windows:
        if not src[i]:
            continue
        count = size_product(src[i])
        if out_counts[o] > 1 and out_counts[o] == count:
            halos = windowed_halos(lhs.shape[i], count, window)
            if not isinstance(halos, tuple):
                continue
            halos, windowed = halos
            found.extend(_permutes(lhs, local, i, halos, _names(out_axes[o])))
            local[i] = windowed
        elif size_product(kernel_axes[k]) == count and out_counts[o] == 1:
            halos = _kernel_sharded_halos(lhs.shape[i], count, window, result.shape[o])
            if halos is None:
                continue
            found.extend(_permutes(lhs, local, i, halos, _names(src[i])))
            local[i] += sum(halos)
            spatial_axes.extend(_names(src[i]))
    return found, tuple(spatial_axes)


def split_conv_all_reduces(needs: tuple[OpCommunication, ...], spatial: tuple[str, ...]
                           ) -> tuple[OpCommunication, ...]:
    """A convolution's partial sums over sharded kernel spatial dimensions and over other
    axes (its contracted features): XLA partitions the spatial window inside the groups
    of the other axes, an all-reduce for each (the whole result both times)."""
    if not spatial:
        return needs
    out = []
    for need in needs:
        c = need.collective
        other = tuple(a for a in c.axes if a not in spatial)
        if need.operand is not None or c.kind != ALL_REDUCE or not other or other == c.axes:
            out.append(need)
            continue
        out.append(OpCommunication(None, need.reason + " (its features)",
                                   Collective(ALL_REDUCE, other, c.bytes_per_device)))
        out.append(OpCommunication(None, need.reason + " (its spatial window)",
                                   Collective(ALL_REDUCE, tuple(a for a in c.axes if a in spatial),
                                              c.bytes_per_device)))
    return tuple(out)


def halo_needs(op: ir.Operation, operands: list[Tensor], results: list[Tensor],
               needs: tuple[OpCommunication, ...] = ()) -> tuple[OpCommunication, ...]:
    """The halo collective-permutes of a slice, pad or reverse of sharded dimensions
    or of a convolution's windows (after the reshards its rule needs: ``needs``);
    none for other ops. XLA's slice handler first reshards its operand to the
    result's sharding (from a replicated one by a local slice), a pad's reads the
    operand as its rule leaves it (a replicated one is padded locally)."""
    if op.name not in HALO_OPS or not operands or not results:
        return ()
    operand, result = operands[0], results[0]
    if op.name == CONVOLUTION:
        found, _ = conv_collectives(op, operand, operands[1], result)
        reason = "halo of the input rows a sharded convolution window reads"
    elif op.name == "stablehlo.reverse":
        found = reverse_collectives(op, operand, result)
        reason = "a reversed sharded dimension: every shard to its mirror device"
    else:
        if op.name == "stablehlo.slice":
            windows = slice_windows(op, operand.shape)
            src = dim_axes(result.sharding, len(result.shape)) if result.sharding else None
        elif op.name == "stablehlo.pad":
            windows = pad_windows(op)
            src = next((list(n.target) for n in needs if n.operand == 0 and n.target), None)
        else:
            return ()
        found = window_halo_collectives(operand, result, windows, src) or []
        reason = "halo of a windowed read of a sharded dimension"
    return tuple(OpCommunication(0, reason, collective) for collective in found)


def rotate_needs(result: Tensor, dim: int, amount: int) -> tuple[OpCommunication, ...]:
    """``rotate_collectives`` as the needs of the concatenate XLA rewrote."""
    reason = f"rotated right by {amount} along sharded dimension {dim}"
    return tuple(OpCommunication(None, reason, collective)
                 for collective in rotate_collectives(result, dim, amount))
