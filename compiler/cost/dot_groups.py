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

Not modelled (``regrouped_operand`` answers None, the plain reshard
stands): dots with sharded batch factors, both operands matching the
result, a matching operand on other axes than the result, sub-axes,
convolutions with a sharded spatial dimension or with groups, and
the last resort of XLA's search (the operand's tiles laid out on the group
devices in order, when no layout above fits). Validated against compiled
HLO on XLA:CPU (``bench/comm_report.py``, docs/cost-model.md).
"""

from __future__ import annotations

from collections.abc import Sequence
from math import prod

from shardc.compiler.cost.reshard import dim_axes, shard_bytes
from shardc.compiler.propagation.projection import projected_axes
from shardc.compiler.sharding.axes import AxisRef, full_axis
from shardc.compiler.sharding.rule import OpShardingRule
from shardc.compiler.sharding.tensor import DimSharding, Tensor, TensorSharding


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
                      convolution: bool = False) -> tuple[int, TensorSharding] | None:
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
    every = [*axes, out]
    if any(a.pre != 1 or a.size != a.total for fa in every for f in fa for a in fa[f]):
        return None  # sub-axes: not modelled
    if any(fa.get(f) for fa in every for f in batch):
        return None  # XLA groups on batch dims first
    matching = [side for side in (0, 1)
                if prod(a.size for f in non_contracting[side] for a in out.get(f, ())) > 1
                and all(axes[side].get(f, ()) == out.get(f, ()) for f in non_contracting[side])]
    if len(matching) != 1:
        return None
    other = 1 - matching[0]
    group = {a.name for f in non_contracting[matching[0]] for a in out[f]}
    moved = _other_layout(operands[other].sharding, group, mesh_axes)
    return None if moved is None else (other, moved)


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
    if any(fa.get(f) for fa in (*axes, out) for f in batch):
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
