"""Where XLA's dot handler moves the operand it replicates across device groups.

When a dot's result keeps one operand's non-contracting sharding (the
*matching* operand carries the result's axes on those factors), XLA's dot
handler groups the devices on those axes and partitions the dot inside each
group (``PartitionDotGroupOnNonContracting``). The *other* operand must then
hold the same data in every group. If it is partially replicated over a
multiple of the group count, XLA looks for a layout of its tiles in which
every group holds each tile equally often
(``GetNonContractingPartitionGroupedShardingForOtherOperand``): first its
layout as it is (the group axes among its replicated axes), then each of its
dimensions, last to first, whose axes contain the group axes and whose tile
count the group count divides, with that dimension's axes and the replicated
axes swapped. The operand is resharded to that layout before the dot (a
collective-permute when the tile count stays), and then, inside the groups,
to what the dot needs. For example, on a 2x2x2 (data, fsdp, model) mesh,
``h^T @ g`` with ``h`` and ``g`` ``[{"data"}, {"model"}]`` and the result
``[{"model"}, {}]`` groups on ``model``: ``g`` moves to ``[{"data"},
{"fsdp"}]`` (a collective-permute) and is all-gathered over ``fsdp``. An
operand not partially replicated over a multiple of the group count but
sharded on the group axes alone (on some of its dimensions, together all of
them) is grouped on those dimensions and all-gathered there
(``FindMatchingPartitionedDimsForGrouping``): a CG step's ``a [{"data"},
{"model"}] @ p [{"data"}]`` all-gathers ``p`` over ``data``.

A convolution is such a dot to XLA (``DotConvDimsMapping``): the input batch is
the lhs's non-contracting dimension, the output feature the rhs's, the input
feature is contracted, and the spatial dimensions are partitioned apart
(``PartitionConvolution``, first, where one is sharded). With its spatial
factors unsharded and no feature or batch groups, it is grouped as a dot is:
a forward convolution on its batch-sharded activations (``data``), whose
in-group all-gather of the channel-sharded input is not the one the weight
gradient's convolution makes outside any group, which XLA therefore does again.

A dot whose result is sharded on batch dimensions that one operand holds
as the result does and the other not at all is grouped on the batch
(``PartitionDotGroupOnBatch``): the other operand takes the result's batch
tiles out of its replication (else out of its non-contracting, else its
contracting tiles) and keeps its other dimensions' tile counts, laid on the
devices of each group. A contraction it holds on the batch axes moves to
idle axes and stays sharded there: an MoE combine ``gsec,egcd->gsd`` on a
(data 8, model 8) mesh, the result and ``comb`` batch-sharded on ``data``,
the experts' ``e`` on ``data``, is a collective-permute of the experts to
``[{"model"}, {"data"}, ...]`` and an all-reduce over ``model``, not an
all-to-all of the experts.

Not modelled (``regrouped_operand`` answers None, the plain reshard
stands): a batch grouping competing with another (XLA orders them by
cost), both operands matching the result, a matching operand on other axes than the result, sub-axes,
convolutions with a sharded spatial dimension or with groups, and
the last resort of XLA's search (the operand's tiles laid out on the group
devices in order, when no layout above fits). Validated against compiled
HLO on XLA:CPU (``bench/comm_report.py``, docs/cost-model.md).
"""

from __future__ import annotations

from collections.abc import Sequence
from math import prod
from typing import NamedTuple

from shardc.compiler.cost.reshard import dim_axes, shard_bytes
from shardc.compiler.propagation.projection import projected_axes
from shardc.compiler.sharding.axes import AxisRef, full_axis
from shardc.compiler.sharding.rule import OpShardingRule
from shardc.compiler.sharding.tensor import DimSharding, Tensor, TensorSharding


class Regrouped(NamedTuple):
    """The operand XLA's dot handler moves before grouping the devices, and where to."""

    operand: int
    sharding: TensorSharding
    # What the groups are made on: the other operand's "non-contracting" dimensions
    # or the result's "batch" dimensions.
    on: str


def _factor_axes(tensor: Tensor, mapping, rule: OpShardingRule) -> dict[int, tuple] | None:
    if tensor.sharding is None or len(tensor.sharding.dims) != len(mapping):
        return None
    return projected_axes(tensor.sharding, mapping, rule.factor_sizes)


def _window_factors(rule: OpShardingRule) -> set[int]:
    """A convolution's spatial factors: its window counts (``permutation``) and the
    kernel's windows (read by the operands only, never reduced)."""
    out = {f for mapping in rule.result_mappings for dim in mapping for f in dim}
    read = {f for mapping in rule.operand_mappings for dim in mapping for f in dim}
    return set(rule.permutation_factors) | (read - out - set(rule.reduction_factors))


def _dot_factors(rule: OpShardingRule, convolution: bool = False
                 ) -> tuple[set[int], tuple[set[int], set[int]]] | None:
    """``(batch, (lhs non-contracting, rhs non-contracting))`` when ``rule`` is a plain
    dot's: two operands, one result, every factor batch, contracting or non-contracting
    (not a custom call's: XLA's dot handler partitions dots and convolutions only).
    A ``convolution``'s spatial factors are left out (``_window_factors``); one with
    feature or batch groups (a factor of all three tensors) is not a plain dot."""
    window = _window_factors(rule) if convolution else set()
    if (len(rule.operand_mappings) != 2 or len(rule.result_mappings) != 1 or rule.is_custom
            or rule.need_replication_factors or rule.blocked_propagation_factors
            or (rule.permutation_factors and not convolution)):
        return None
    lhs, rhs, out = ({f for dim in mapping for f in dim} - window
                     for mapping in (*rule.operand_mappings, rule.result_mappings[0]))
    contracting = (lhs & rhs) - out
    if not contracting <= set(rule.reduction_factors) or (lhs | rhs) != (out | contracting):
        return None
    if convolution and lhs & rhs & out:
        return None
    return lhs & rhs & out, (lhs - rhs, rhs - lhs)


def _dot_axes(rule: OpShardingRule, operands: Sequence[Tensor], results: Sequence[Tensor],
              convolution: bool = False):
    """A dot's (batch factors, non-contracting factors per side, each operand's and the
    result's mesh axes per factor); None when the op is not a dot or a tensor's axes
    cannot be read, or when a ``convolution``'s spatial dimension is sharded (XLA
    partitions it as a windowed op first)."""
    factors = _dot_factors(rule, convolution)
    if factors is None:
        return None
    axes = [_factor_axes(t, m, rule) for t, m in zip(operands, rule.operand_mappings)]
    out = _factor_axes(results[0], rule.result_mappings[0], rule)
    if out is None or any(a is None for a in axes):
        return None
    if convolution and any(fa.get(f) for fa in (*axes, out) for f in _window_factors(rule)):
        return None
    return (*factors, axes, out)


def regrouped_operand(rule: OpShardingRule, operands: Sequence[Tensor],
                      results: Sequence[Tensor], mesh_axes: Sequence[tuple[str, int]],
                      convolution: bool = False) -> Regrouped | None:
    """The operand XLA's dot handler moves before grouping the dot, and where to.

    ``mesh_axes`` are the mesh's (name, size) pairs, major to minor
    (``convolution``: the op is one, ``_dot_factors``). None
    when the op is not a dot, when XLA would not group it on one operand's
    non-contracting axes, or when the other operand stays where it is.
    """
    read = _dot_axes(rule, operands, results, convolution) if mesh_axes else None
    if read is None:
        return None
    batch, non_contracting, axes, out = read
    if any(out.get(f) for f in batch):
        return _batch_regrouped(rule, operands, batch, non_contracting, axes, out, mesh_axes)
    matching = [side for side in (0, 1)
                if prod(a.size for f in non_contracting[side] for a in out.get(f, ())) > 1
                and all(axes[side].get(f, ()) == out.get(f, ()) for f in non_contracting[side])]
    if len(matching) != 1:
        return None
    other = 1 - matching[0]
    if any(a.pre != 1 or a.size != a.total
           for a in (*(a for f in non_contracting[matching[0]] for a in out.get(f, ())),
                     *(a for f in axes[other] for a in axes[other][f]))):
        return None  # groups on sub-axes, or a moved operand on them: not modelled
    group = {a.name for f in non_contracting[matching[0]] for a in out[f]}
    moved = _other_layout(operands[other].sharding, group, mesh_axes)
    return None if moved is None else Regrouped(other, moved, "non-contracting")


def matching_operand(rule: OpShardingRule, operands: Sequence[Tensor],
                     results: Sequence[Tensor], convolution: bool = False
                     ) -> tuple[int, tuple[str, ...]] | None:
    """The operand XLA's dot handler groups the devices on, and the axes of the groups.

    ``PartitionDotGroupOnNonContractingDims`` groups on an operand whose
    non-contracting dimensions are split into as many tiles as the result's
    (on both sides: the lhs when its tile count times the rhs's shard bytes is
    the smaller, ``LhsIsBestMatchForNonContractingPartitioning``; on neither:
    the first side split on both, on the dimensions whose counts agree). The
    other operand is resharded before the groups are made; the matching
    operand's reshards are made inside them, with the reshard cache of that
    grouping (``CreatePerGroupPartitioningState``), so XLA reuses them only for
    dots grouped alike. None when the op is not a dot or XLA groups on batch
    dimensions first or on none (``convolution``: the op is one, ``_dot_factors``).
    """
    read = _dot_axes(rule, operands, results, convolution)
    if read is None:
        return None
    batch, non_contracting, axes, out = read
    if any(out.get(f) for f in batch):
        return None  # XLA groups on batch dims first

    def tiles(found: dict, factors) -> int:
        return prod(a.size for f in factors for a in found.get(f, ()))

    own = [tiles(axes[side], non_contracting[side]) for side in (0, 1)]
    wanted = [tiles(out, non_contracting[side]) for side in (0, 1)]
    may = [own[side] == wanted[side] > 1 for side in (0, 1)]
    if any(may):
        shard = [shard_bytes(t.shape, t.element_bytes, dim_axes(t.sharding, len(t.shape)))
                 for t in operands]
        side = 0 if may[0] and (not may[1] or own[0] * shard[1] < own[1] * shard[0]) else 1
    else:
        split = [side for side in (0, 1) if own[side] > 1 and wanted[side] > 1]
        if not split:
            return None
        side = split[0]
    group = {a.name for f in non_contracting[side]
             if tiles(axes[side], (f,)) == tiles(out, (f,)) for a in out.get(f, ())}
    return (side, tuple(sorted(group))) if group else None


def _other_layout(sharding: TensorSharding, group: set[str],
                  mesh_axes: Sequence[tuple[str, int]]) -> TensorSharding | None:
    """The first layout of XLA's search that fits (None: the operand stays, or no
    modelled layout fits)."""
    sizes = dict(mesh_axes)
    used = {a.name for dim in sharding.dims for a in dim.axes}
    replicated = tuple(full_axis(name, size) for name, size in mesh_axes if name not in used)
    replication = prod(a.size for a in replicated)
    group_count = prod(sizes[name] for name in group)
    if not used or sharding.unreduced:
        return None
    if replication == 1 or replication % group_count:
        return _group_dims_replicated(sharding, group)
    if group <= {a.name for a in replicated}:
        return None  # every group already holds each tile
    for j in reversed(range(len(sharding.dims))):
        dim_axes: tuple[AxisRef, ...] = sharding.dims[j].axes
        count = prod(a.size for a in dim_axes)
        if count > 1 and count % group_count == 0 and group <= {a.name for a in dim_axes}:
            dims = list(sharding.dims)
            dims[j] = DimSharding(replicated, True)
            return sharding._replace(dims=tuple(dims))
    return None


def _group_dims_replicated(sharding: TensorSharding, group: set[str]) -> TensorSharding | None:
    """An operand not partially replicated over a multiple of the groups: when some of
    its dimensions are sharded on the group axes alone, together on all of them, XLA
    groups it on those dimensions (``FindMatchingPartitionedDimsForGrouping``) and
    replicates them (``PartiallyReplicateTiledShardingOnDims``): an all-gather over
    the group axes, before the groups are made. None where no dimensions match."""
    matched = [j for j, dim in enumerate(sharding.dims)
               if dim.axes and {a.name for a in dim.axes} <= group]
    if not matched or {a.name for j in matched for a in sharding.dims[j].axes} != group:
        return None
    if any(a.pre != 1 or a.size != a.total for j in matched for a in sharding.dims[j].axes):
        return None  # sub-axes: not modelled
    dims = list(sharding.dims)
    for j in matched:
        dims[j] = DimSharding((), True)
    return sharding._replace(dims=tuple(dims))


def _batch_regrouped(rule: OpShardingRule, operands: Sequence[Tensor], batch: set[int],
                     non_contracting: tuple[set[int], set[int]], axes, out,
                     mesh_axes: Sequence[tuple[str, int]]) -> Regrouped | None:
    """The operand XLA's batch grouping moves (``PartitionDotGroupOnBatchImpl``).

    The result's batch dimensions are sharded and one operand's batch tiling is
    the result's, the other's unsharded. That other operand takes the result's
    tile counts on its batch dimensions and keeps its other dimensions' counts
    (``reshard_to_output_batch``); where that makes more tiles than devices, the
    extra come out of its replication first, else out of its non-contracting
    dimensions (when as many, unless its contraction is as many and not the other
    operand's), else out of its contracting ones (those become unsharded). The
    groups are the result's: its batch dimensions on the result's batch axes, its
    other dimensions, in order, then its replication, laid on each group's devices
    (the other mesh axes, major to minor), so a contraction on the batch axes moves
    to idle axes and stays sharded there. None when the operands' batch tilings
    agree, when XLA may group on other dimensions instead (both operands' contraction
    alike, or an operand's non-contracting tiling the result's: it picks by cost), or
    the layout is not one of these.
    """
    def tiles(found: dict, factors) -> int:
        return prod(a.size for f in factors for a in found.get(f, ()))

    wanted = tiles(out, batch)
    own = [tiles(axes[side], batch) for side in (0, 1)]
    contracting = set(rule.reduction_factors) - batch
    contracted = [tiles(axes[side], contracting) for side in (0, 1)]
    if wanted == 1 or own[0] == own[1] or wanted not in own or contracted[0] == contracted[1] > 1:
        return None
    if any(tiles(axes[s], non_contracting[s]) == tiles(out, non_contracting[s]) > 1
           for s in (0, 1)):
        return None  # XLA may group on non-contracting dimensions instead, at its cost
    if any(a.pre != 1 or a.size != a.total
           for a in (*(a for f in batch for a in out.get(f, ())),
                     *(a for fa in axes for f in fa for a in fa[f]))):
        return None  # groups on sub-axes, or operands on them: not modelled
    side = 1 if own[0] == wanted else 0
    mapping = rule.operand_mappings[side]
    sharding = operands[side].sharding
    if own[side] != 1 or any(len(dim) != 1 for dim in mapping):
        return None  # a batch sharded on other axes, or a reshaped dimension: not modelled
    factors = [dim[0] for dim in mapping]
    counts = [tiles(axes[side], (f,)) for f in factors]
    used = {a.name for dim in sharding.dims for a in dim.axes}
    replication = prod(size for name, size in mesh_axes if name not in used)
    if replication % wanted:
        ratio = wanted
        fold = non_contracting[side]
        if not (ratio == tiles(axes[side], fold)
                and (ratio != contracted[side] or contracted[side] == contracted[1 - side])):
            fold = contracting
            if ratio != contracted[side]:
                return None
        counts = [1 if f in fold else n for f, n in zip(factors, counts)]
    taken = {a.name for f in batch for a in out.get(f, ())}
    pieces = [(name, 1, size, size) for name, size in mesh_axes if name not in taken]
    dims = []
    for f, count in zip(factors, counts):
        if f in batch:
            dims.append(tuple(out.get(f, ())))
            continue
        found = []
        while count > 1 and pieces:
            name, pre, size, total = pieces.pop(0)
            if size > count:
                if size % count:
                    return None
                pieces.insert(0, (name, pre * count, size // count, total))
                size = count
            elif count % size:
                return None
            found.append(AxisRef(name, pre, size, total))
            count //= size
        if count > 1:
            return None
        dims.append(tuple(found))
    moved = sharding._replace(dims=tuple(DimSharding(d, True) for d in dims))
    return None if moved == sharding else Regrouped(side, moved, "batch")
