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
{"model"}] @ p [{"data"}]`` all-gathers ``p`` over ``data``. Where no layout
fits, XLA moves the operand where the result and the matching operand imply
(``InferDotOperandSharding``: its batch and non-contracting dimensions as the
result holds them, its contraction as the matching operand does), which every
group then holds whole, and gathers it whole where they imply nothing: an FSDP
weight ``[{("data", "model")}, {}]`` under activations ``[{"data"}, {}]`` on
4x2 is all-gathered over all eight devices, not kept on ``model`` for partial
sums.

A convolution is such a dot to XLA (``DotConvDimsMapping``): the input batch is
the lhs's non-contracting dimension, the output feature the rhs's, the input
feature is contracted, and the spatial dimensions are partitioned apart
(``PartitionConvolution``, first, where one is sharded). With its spatial
factors unsharded and no feature or batch groups, it is grouped as a dot is:
a forward convolution on its batch-sharded activations (``data``), whose
in-group all-gather of the channel-sharded input is not the one the weight
gradient's convolution makes outside any group, which XLA therefore does again.

A dot whose result is split on batch dimensions is grouped on that split
(``PartitionDotGroupOnBatch``) where no grouping that moves no operand's
groups comes first: XLA tries the batch, non-contracting and contracting
groupings in that order, first moving no operand's groups
(``require_matching_devices_to_group``), so where the operands split the batch
differently a non-contracting split the result shares wins (an MoE expert
matmul ``egcd,edf->egcf`` whose weight splits ``f`` as the result does). Else
an operand that splits the batch otherwise (or not at
all) is moved to the result's batch split first (``_batch_regrouped``),
keeping its other dimensions' tile counts laid on the devices of each group.
A contraction it holds on the batch axes moves to idle axes and stays
sharded there: an MoE combine ``gsec,egcd->gsd`` on a (data 8, model 8)
mesh, the result and ``comb`` batch-sharded on ``data``, the experts' ``e``
on ``data``, is a collective-permute of the experts to ``[{"model"},
{"data"}, ...]`` and an all-reduce over ``model``, not an all-to-all of the
experts.

Not modelled (``regrouped_operand`` answers None, the plain reshard
stands): a batch grouping competing with a contracting one, both operands
matching the result, a matching operand on other
axes than the result, operands on sub-axes,
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
        found = _batch_regrouped(rule, operands, results, batch, mesh_axes)
        if found is not None or _batch_tiles(axes[0], batch) == _batch_tiles(axes[1], batch):
            return found
        # The operands split the batch differently: grouping on it moves one of them,
        # which XLA's first pass does not do (``require_matching_devices_to_group``);
        # a grouping on a non-contracting split the result shares comes first.
    matching = [side for side in (0, 1)
                if prod(a.size for f in non_contracting[side] for a in out.get(f, ())) > 1
                and all(axes[side].get(f, ()) == out.get(f, ()) for f in non_contracting[side])]
    if len(matching) == 2:
        return _both_matching(operands, non_contracting, axes, out, mesh_axes)
    if len(matching) != 1:
        return None
    other = 1 - matching[0]
    if any(a.pre != 1 or a.size != a.total
           for a in (*(a for f in non_contracting[matching[0]] for a in out.get(f, ())),
                     *(a for f in axes[other] for a in axes[other][f]))):
        return None  # groups on sub-axes, or a moved operand on them: not modelled
    group = {a.name for f in non_contracting[matching[0]] for a in out[f]}
    moved = _other_layout(operands[other].sharding, group, mesh_axes,
                          _may_replicate(rule, other, group, batch, non_contracting[other],
                                         axes, out, mesh_axes))
    if moved is _UNGROUPED:
        moved = _inferred_layout(rule, other, operands[other].sharding, batch,
                                 non_contracting[other], axes[matching[0]], out)
    return None if moved is None else Regrouped(other, moved, "non-contracting")


def _inferred_layout(rule: OpShardingRule, other: int, sharding: TensorSharding,
                     batch: set[int], own: set[int], matching: dict[int, tuple],
                     out: dict[int, tuple]) -> TensorSharding | None:
    """Where XLA moves an operand it cannot group as it is: the sharding the dot's
    result and the matching operand imply for it (``InferDotOperandSharding``): its
    batch and non-contracting dimensions as the result holds them, its contracting
    ones as the matching operand holds them where that agrees with the result's part
    (else the result's part alone). Its tiles then lie on no group axis, and every
    group holds each of them; an operand they imply nothing for is gathered whole
    (``Replicate``). None where a dimension carries several factors (not modelled)."""
    mapping = rule.operand_mappings[other]
    if any(len(dim) > 1 for dim in mapping):
        return None
    from_out = {f: out.get(f, ()) for dim in mapping for f in dim if f in batch | own}
    from_matching = {f: matching.get(f, ()) for dim in mapping for f in dim
                     if f not in own}
    used = {a.name for axes in from_out.values() for a in axes}
    merged = dict(from_out)
    if not any(a.name in used for axes in from_matching.values() for a in axes) and all(
            not from_out.get(f) or not axes or from_out[f] == axes
            for f, axes in from_matching.items()):
        merged.update((f, axes) for f, axes in from_matching.items() if axes)
    return sharding._replace(dims=tuple(
        DimSharding(tuple(merged.get(dim[0], ())) if dim else (), True) for dim in mapping))


def _batch_regrouped(rule: OpShardingRule, operands: Sequence[Tensor],
                     results: Sequence[Tensor], batch: set[int],
                     mesh_axes: Sequence[tuple[str, int]]) -> Regrouped | None:
    """``PartitionDotGroupOnBatch`` when the operands split their batch dimensions
    differently: XLA groups the devices as the result splits its batch dimensions and
    moves each operand there (``reshard_to_output_batch``): its tile array, with the
    batch counts the result's, is read again in its device order (dropping replicas,
    else the non-contracting or the contracting split, when that asks for more tiles
    than devices) and its groups aligned with the result's. When the groups hold other
    devices than the result's (``AlignGroupsWith``), the batch dimensions take the
    result's axes and the other dimensions the axes of the result's groups, in order:
    a MoE dispatch ``gsec,egcd->gsd`` with ``egcd [{"fsdp"}, {"data"}]`` and the result
    ``[{"data", "fsdp"}]`` on 2x2x2 moves ``egcd`` to ``[{"model"}, {"data", "fsdp"}]``
    (a slice and a collective-permute), then gathers ``e`` inside the groups. XLA tries
    this only after the groupings that move no operand's groups (``PartitionDot``'s
    first pass): None when an operand's non-contracting split is the result's or both
    operands split their contraction alike (XLA picks among those by cost), when the
    batch splits agree (the plain reshard stands), or when more than one operand
    moves. Where the moved operand has more tiles than devices, the extra come out
    of its replication first, else out of its non-contracting dimensions (when as
    many, unless its contraction is as many and not the other operand's), else out
    of its contracting ones; a contraction on the batch axes thus moves to idle axes
    (their major part where it needs fewer devices) and stays sharded there."""
    tensors = [*operands, results[0]]
    mappings = [*rule.operand_mappings, rule.result_mappings[0]]
    if any(len(dim) > 1 for mapping in mappings for dim in mapping):
        return None
    dim_of = [{dim[0]: d for d, dim in enumerate(mapping) if dim} for mapping in mappings]
    axes = [dim_axes(t.sharding, len(t.shape)) for t in tensors]
    if any(a.pre != 1 or a.size != a.total for dims in axes for dim in dims for a in dim):
        return None  # sub-axes: not modelled
    order = sorted(batch)

    def count(k: int, d: int) -> int:
        return prod(a.size for a in axes[k][d])

    def counts(k: int, factors) -> list[int]:
        return [count(k, dim_of[k][f]) for f in factors]

    wanted = counts(2, order)
    sides = [counts(0, order), counts(1, order)]
    if sides[0] == sides[1] or prod(wanted) == 1 or prod(wanted) not in map(prod, sides):
        return None
    contracting = [set(dim_of[k]) - set(dim_of[2]) for k in (0, 1)]
    if not contracting[0]:
        return None  # an elementwise op: its operands follow the result
    # XLA first tries each grouping without moving an operand's groups: on an
    # operand's non-contracting split that is the result's, or on contractions split
    # alike on both sides.
    splits = [prod(counts(k, contracting[k])) for k in (0, 1)]
    own = [[f for f in dim_of[k] if f not in batch and f not in contracting[k]]
           for k in (0, 1)]
    if any(prod(counts(k, own[k])) == prod(counts(2, own[k])) > 1 for k in (0, 1)) or (
            splits[0] == splits[1] > 1):
        return None
    moved = [_to_output_batch(k, tensors, axes, dim_of, batch, contracting, mesh_axes)
             for k in (0, 1)]
    if any(m is None for m in moved):
        return None
    changed = [k for k in (0, 1) if moved[k] != operands[k].sharding]
    return Regrouped(changed[0], moved[changed[0]], "batch") if len(changed) == 1 else None


def _to_output_batch(k: int, tensors: Sequence[Tensor], axes, dim_of, batch: set[int],
                     contracting: list[set[int]], mesh_axes: Sequence[tuple[str, int]]
                     ) -> TensorSharding | None:
    """Operand ``k``'s sharding after ``reshard_to_output_batch`` (its own when it stays;
    None where XLA's step gives up)."""
    operand = tensors[k]
    mine, theirs = axes[k], axes[2]
    rank = len(mine)
    if not any(mine):
        return operand.sharding  # replicated: each group slices its part
    sizes = dict(mesh_axes)
    used = {a.name for dim in mine for a in dim}
    spare = [full_axis(name, size) for name, size in mesh_axes if name not in used]
    replicas = prod(a.size for a in spare)
    have = [prod(a.size for a in dim) for dim in mine]
    adjusted = list(have)
    for f in batch:
        adjusted[dim_of[k][f]] = prod(a.size for a in theirs[dim_of[2][f]])
    own_contracting = [dim_of[k][f] for f in contracting[k]]
    non_contracting = [d for f, d in dim_of[k].items() if f not in batch
                       and f not in contracting[k]]
    split = prod(have[d] for d in own_contracting)
    other_split = prod(prod(a.size for a in axes[1 - k][dim_of[1 - k][f]])
                       for f in contracting[1 - k])
    devices = prod(sizes.values())
    total = prod(adjusted) * replicas
    if total > devices:
        if total % devices:
            return None
        ratio = total // devices
        if replicas > 1 and replicas % ratio == 0:
            replicas //= ratio
        elif ratio == prod(have[d] for d in non_contracting) and (
                ratio != split or split == other_split):
            for d in non_contracting:
                adjusted[d] = 1
        elif ratio == split:
            for d in own_contracting:
                adjusted[d] = 1
        else:
            return None
    if prod(adjusted) * replicas < devices:
        return None
    # The tile array read again with the new counts, in its device order.
    flat = [a for dim in mine for a in dim] + spare
    dims = _cut(flat, adjusted + [replicas])
    if dims is None:
        return None
    batch_dims = {dim_of[k][f]: dim_of[2][f] for f in batch}
    if any(tuple(dims[d]) != tuple(theirs[o]) for d, o in batch_dims.items()):
        # Other groups than the result's: each group's layout on the result's group.
        out_used = {a.name for dim in theirs for a in dim}
        inner = [a for o, dim in enumerate(theirs) if o not in batch_dims.values()
                 for a in dim] + [full_axis(n, s) for n, s in mesh_axes if n not in out_used]
        others = [d for d in range(rank) if d not in batch_dims]
        placed = _cut(inner, [adjusted[d] for d in others] + [replicas])
        if placed is None:
            return None
        dims = [list(theirs[batch_dims[d]]) if d in batch_dims else placed[others.index(d)]
                for d in range(rank)]
    return operand.sharding._replace(dims=tuple(
        DimSharding(tuple(dims[d]), operand.sharding.dims[d].closed) for d in range(rank)))


def _cut(flat: Sequence[AxisRef], counts: Sequence[int]) -> list[list[AxisRef]] | None:
    """``flat`` (axes major to minor) dealt out to dimensions of ``counts`` in order, an
    axis split into its major and minor parts where a count takes part of it (XLA
    reshapes the tile array); None when a count is not a product of the parts left."""
    out, rest = [], list(flat)
    for count in counts:
        taken: list[AxisRef] = []
        while count > 1 and rest:
            a = rest.pop(0)
            if a.size > count:
                if a.size % count:
                    return None
                rest.insert(0, AxisRef(a.name, a.pre * count, a.size // count, a.total))
                a = AxisRef(a.name, a.pre, count, a.total)
            elif count % a.size:
                return None
            taken.append(a)
            count //= a.size
        if count != 1:
            return None
        out.append(taken)
    return out


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


def _both_matching(operands: Sequence[Tensor], non_contracting, axes,
                   out: dict[int, tuple], mesh_axes: Sequence[tuple[str, int]]
                   ) -> Regrouped | None:
    """Both operands split their non-contracting dimensions as the result does. XLA
    groups on the side whose tile count times the other's shard bytes is the smaller
    (``LhsIsBestMatchForNonContractingPartitioning``); where the other operand's
    replicated axes hold those groups already it stays, and inside the groups XLA
    groups again on the other side's split, moving the first operand as the other
    operand of that grouping (``_other_layout`` on the axes left inside): a vocab
    projection ``h [{"x"}, {}] @ e.T [{"x"}, {"y"}]`` on 2x2x2 moves ``e.T`` to
    ``[{"z"}, {"y"}]`` and reduces its partial sums over ``z``. None where the first
    grouping moves the other operand or an operand sits on sub-axes (not modelled)."""
    tiles = [prod(a.size for f in non_contracting[s] for a in out.get(f, ())) for s in (0, 1)]
    shard = [shard_bytes(t.shape, t.element_bytes, dim_axes(t.sharding, len(t.shape)))
             for t in operands]
    first = 0 if tiles[0] * shard[1] < tiles[1] * shard[0] else 1
    second = 1 - first
    if any(a.pre != 1 or a.size != a.total for found in axes for f in found for a in found[f]):
        return None
    outer = {a.name for f in non_contracting[first] for a in out[f]}
    inner = {a.name for f in non_contracting[second] for a in out[f]}
    if outer & {a.name for found in axes[second].values() for a in found}:
        return None
    moved = _other_layout(operands[first].sharding, inner,
                          [(name, size) for name, size in mesh_axes if name not in outer])
    if not isinstance(moved, TensorSharding) or outer & {
            a.name for d, dim in enumerate(moved.dims) for a in dim.axes
            if dim != operands[first].sharding.dims[d]}:
        return None
    return Regrouped(first, moved, "non-contracting")


def _batch_tiles(found: dict[int, tuple], batch: set[int]) -> list[int]:
    return [prod(a.size for a in found.get(f, ())) for f in sorted(batch)]


def _may_replicate(rule: OpShardingRule, other: int, group: set[str], batch: set[int],
                   own: set[int], axes, out: dict[int, tuple],
                   mesh_axes: Sequence[tuple[str, int]]) -> bool:
    """Whether XLA may group the other operand on its contracting or its own
    non-contracting dimensions by their tile counts alone (``may_replicate_other_
    contracting_dims`` / ``may_replicate_other_non_contracting_dims``)."""
    group_count = prod(size for name, size in mesh_axes if name in group)
    contracting = {f for dim in rule.operand_mappings[other] for f in dim} - batch - own

    def tiles(found: dict, factors) -> int:
        return prod(a.size for f in factors for a in found.get(f, ()))

    mine = axes[other]
    return ((tiles(mine, contracting) == group_count and tiles(mine, own) == tiles(out, own))
            or (group_count == tiles(mine, own)
                and tiles(axes[1 - other], contracting) == tiles(mine, contracting)))


# ``_other_layout``'s answer where XLA finds no grouping of the other operand as it is.
_UNGROUPED = object()


def _other_layout(sharding: TensorSharding, group: set[str],
                  mesh_axes: Sequence[tuple[str, int]], may_replicate: bool = True):
    """The first layout of XLA's search that fits (None: the operand stays, or no
    modelled layout fits; ``_UNGROUPED``: XLA's search finds none, ``may_replicate``
    as ``_may_replicate`` answers)."""
    sizes = dict(mesh_axes)
    used = {a.name for dim in sharding.dims for a in dim.axes}
    replicated = tuple(full_axis(name, size) for name, size in mesh_axes if name not in used)
    replication = prod(a.size for a in replicated)
    group_count = prod(sizes[name] for name in group)
    if not used or sharding.unreduced:
        return None
    if replication == 1 or replication % group_count:
        found = _group_dims_replicated(sharding, group)
        return _UNGROUPED if found is _UNGROUPED and not may_replicate else (
            None if found is _UNGROUPED else found)
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


def _group_dims_replicated(sharding: TensorSharding, group: set[str]):
    """An operand not partially replicated over a multiple of the groups: when some of
    its dimensions are sharded on the group axes alone, together on all of them, XLA
    groups it on those dimensions (``FindMatchingPartitionedDimsForGrouping``) and
    replicates them (``PartiallyReplicateTiledShardingOnDims``): an all-gather over
    the group axes, before the groups are made. ``_UNGROUPED`` where no dimensions
    match, None where they sit on sub-axes (not modelled)."""
    matched = [j for j, dim in enumerate(sharding.dims)
               if dim.axes and {a.name for a in dim.axes} <= group]
    if not matched or {a.name for j in matched for a in sharding.dims[j].axes} != group:
        return _UNGROUPED
    if any(a.pre != 1 or a.size != a.total for j in matched for a in sharding.dims[j].axes):
        return None  # sub-axes: not modelled
    dims = list(sharding.dims)
    for j in matched:
        dims[j] = DimSharding((), True)
    return sharding._replace(dims=tuple(dims))

