"""The communication one op needs, from its sharding rule and its operand/result shardings.

XLA partitions every instruction to its result sharding. Through the op's
sharding rule (``shardc.compiler.sharding.rules``) each factor gets the axes
the op must see it sharded on: the result's axes for factors the result
has, no axes for need-replication factors, and for a reduction factor the
axes of the operand with the most bytes that is sharded along it (XLA's dot
handler reshards the smaller operand). Every operand whose sharding differs
from that requirement is resharded (``reshard.reshard_tensor``), and a
reduction factor left sharded leaves partial sums that an all-reduce over
its axes combines. A dot that XLA groups on one operand's non-contracting
axes first moves the other operand where every group holds all of it
(``dot_groups``). This is the implicit communication Shardy's
``insert-explicit-reshards`` would make explicit.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from math import prod

from shardc.compiler.cost.dot_groups import matching_operand, regrouped_operand
from shardc.compiler.cost.platforms import active_rules
from shardc.compiler.cost.reshard import (
    ALL_GATHER,
    COLLECTIVE_PERMUTE,
    REDUCE_SCATTER,
    Collective,
    all_reduce,
    axis_names,
    dot_partial_sums,
    mesh_axes,
    reduce_scatter_halo,
    reshard_tensor,
)
from shardc.compiler.propagation.graph import ELEMENTWISE
from shardc.compiler.propagation.projection import AXES, OVERFLOW, project, projected_axes
from shardc.compiler.sharding.axes import AxisRef, overlaps, size_product
from shardc.compiler.sharding.rule import OpShardingRule
from shardc.compiler.sharding.tensor import DimSharding, MeshInfo, Tensor, TensorSharding

# Ops XLA's SPMD partitioner has no partitioning for: it replicates every operand
# (all-gathers, minor-most dimension first), runs the op on every device and slices
# the result to its sharding (checked on XLA:CPU against compiled HLO: top_k and fft
# with batch-sharded, sort-dimension-sharded and both-sharded operands).
# A convolution with feature groups whose kernel holds more than one input feature per
# group on a device is one too: XLA's dot handler gives up on it before any grouping
# (``PartitionDot``: "feature_group_count > 1 and kernel_input_feature_dim > 1 is
# not supported"), a depthwise one (one input feature per group) is partitioned
# (checked on XLA:CPU: a batch-sharded 4-group convolution gathers its input whole).
UNPARTITIONED_CONVOLUTION = "stablehlo.convolution (feature groups)"
# A convolution with batch groups (a depthwise kernel's gradient) whose kernel output
# features are sharded over part of the devices and whose input's grouped dimension is
# not: XLA's convolution handler aligns the groups only when one side is split over
# every device (``PartitionConvolutionWithBatchGroupCount``), else it reshards the
# kernel to the input's sharding (gathering its output features), computes partial
# sums of the whole result, all-reduces them and slices the result (checked on XLA:CPU:
# a [N, H, W, C] gradient on [{"x"}, {}, {}, {"y"}] against an input on [{"x"}]).
GATHERED_BATCH_GROUPS = "stablehlo.convolution (batch groups gathered)"
XLA_REPLICATED_OPS = frozenset({"chlo.top_k", "stablehlo.fft", UNPARTITIONED_CONVOLUTION})


def xla_replicates(op_name: str | None) -> bool:
    """Whether XLA replicates op ``op_name`` on the platform predicted for: one of
    ``XLA_REPLICATED_OPS`` the platform does not partition by its sharding rule
    (``PlatformRules.partitioned_ops``)."""
    return op_name in XLA_REPLICATED_OPS and op_name not in active_rules().partitioned_ops


# A reduce of several operands at once (an argmax's values and indices) has no
# all-reduce: XLA's reduce handler keeps each local result's reduced dimensions (size
# one, tiled as the operand was), all-gathers them over the axes reduced over and
# reduces the gathered results again (checked on XLA:CPU: argmax over a sharded axis),
# after resharding every operand as the first one is sharded (checked on XLA:CPU: an
# argmin over a dimension sharded in its distances, its iota indices sharded otherwise).
VARIADIC_REDUCE = REDUCE = "stablehlo.reduce"
# Why a padded reduce-scatter is followed by a collective-permute
# (``reshard.reduce_scatter_halo``).
HALO_REASON = "the rows of each device's shard its padded reduce-scatter left on the previous one"
# A custom call XLA has no partitioner for (a LAPACK factorization...) runs on every
# device along the factors its rule shares with its results (batch dims) and needs
# every other factor of its operands whole: XLA all-gathers them (checked on XLA:CPU:
# ``lu_factor`` of a [16, 16] matrix sharded on rows, of a batch sharded on the batch
# only, and on the batch and rows). ``jax.experimental.custom_partitioning``'s calls
# are partitioned by their own callback and are not this op name.
UNPARTITIONED_CUSTOM_CALL = "stablehlo.custom_call"
# XLA's dot handler partitions convolutions too, grouping them as dots (dot_groups).
CONVOLUTION = "stablehlo.convolution"
RESHAPE = "stablehlo.reshape"


@dataclass(frozen=True)
class OpCommunication:
    """One collective an op needs: for which operand (None: the result) and why."""

    operand: int | None
    reason: str
    collective: Collective
    target: tuple | None = None  # per-dimension axes the operand is resharded to
    # The mesh axes of the device groups XLA reshards the operand inside (a grouped
    # dot's matching operand, ``dot_groups.matching_operand``); () before any grouping.
    # A reshard is reused only by ops that reshard the value inside the same groups.
    groups: tuple[str, ...] = ()
    # For a result (``operand`` None) resharded to its declared sharding: the
    # per-dimension axes the op computes it in (the memory estimate lays out the
    # buffers of that reshard from it); None otherwise.
    source: tuple | None = None
    # What XLA's reshard cache keys this reshard by, where that is not ``target``:
    # the layout a dot moves an operand to before grouping (``dot_groups``), the
    # layout it was moved to and the target after that, and the whole value where
    # XLA gathers it whole and slices it (``Replicate`` caches that value).
    reuse: tuple | None = None


def _result_factor_axes(rule: OpShardingRule, results: Sequence[Tensor]) -> dict[int, tuple]:
    axes: dict[int, tuple] = {}
    for tensor, mapping in zip(results, rule.result_mappings):
        if tensor.sharding is None or len(tensor.sharding.dims) != len(mapping):
            continue
        proj = project(tensor.sharding, mapping, rule.factor_sizes)
        for factor, record in proj.factors.items():
            if not axes.get(factor):
                axes[factor] = record[AXES]
        # The factors after an overflow (axes that split no major factor evenly: a
        # fused qkv dimension of 3 x heads x head_dim on a larger axis) hold none of
        # them: the op computes those whole and slices the result.
        for dim in mapping:
            for factor in dim:
                axes.setdefault(factor, ())
    return axes


def _devices(mesh) -> int | None:
    """The device count of ``mesh`` (a ``MeshInfo`` or (axis, size) pairs; None: unknown)."""
    if mesh is None:
        return None
    sizes = mesh.sizes.values() if hasattr(mesh, "sizes") else [size for _, size in mesh]
    total = 1
    for size in sizes:
        total *= size
    return total


def _contraction_partitions(rule: OpShardingRule, factor: int, projections, axes: tuple,
                            devices: int, result_axes: dict[int, tuple],
                            shapes: tuple[list, tuple] | None) -> bool:
    """Whether XLA partitions a dot's contraction ``factor`` over ``axes`` (see below)."""
    carriers = [proj for proj, m in zip(projections, rule.operand_mappings)
                if any(factor in dim for dim in m)]
    if len(carriers) < 2:
        return True  # a reduce: partial sums, whatever the mesh
    count = size_product(axes)
    if all(proj is not None and factor in proj.factors and proj.factors[factor][AXES]
           and size_product(proj.factors[factor][AXES]) == count for proj in carriers):
        return True  # every operand tiled alike: a permute lines them up
    held = [size_product(proj.factors[factor][AXES]) for proj in carriers
            if proj is not None and factor in proj.factors and proj.factors[factor][AXES]]
    if (len(held) == len(carriers) and len(set(held)) > 1
            and not _grouping_moves_other(rule, projections, result_axes)):
        # Both operands split it, into different tile counts, and no grouping moves
        # one of them first: no grouping on it matches (``PartitionDotGroupOn
        # Contracting`` needs equal counts), and XLA's last resort reshards each
        # operand to what the result implies, the contraction whole
        # (``ReshardLHSRHSToMatchOutputSharding``).
        return False
    grouped: set[AxisRef] = set()
    for proj in projections:
        if proj is None:
            continue
        for other, want in result_axes.items():
            if other != factor and other in proj.factors:
                grouped.update(a for a in proj.factors[other][AXES] if a in want)
    if size_product([*axes, *grouped]) < devices:
        return False
    return _partial_sums_pay(rule, factor, projections, grouped, result_axes, shapes)


def _covering_operand(rule: OpShardingRule, operands: Sequence[Tensor], projections,
                      devices: int | None, result_axes: dict[int, tuple] | None):
    """The projection of the dot operand XLA partitions the contraction as, where one's
    contraction factors alone split it over every device; None where none does, or
    where the result takes another of the dot handler's cases (``_summed_and_sliced``).

    XLA's dot handler (``PartitionBaseCase``, before any grouping or last resort)
    reshards the other operand to that one's tiles and sums the partial products, one
    all-reduce per sharded contracting dimension of it (``AllReduceAlongShardingDims``).
    Where both operands' contractions cover the devices, the one with fewer bytes is
    resharded, the left one where they have as many (checked on XLA:CPU: ``x^T dy``
    of [{"data"}, {"model"}, {}] and [{"data", "model"}, {}, {}] all-to-alls the
    smaller and all-reduces once or twice as the larger is split)."""
    if (devices is None or len(rule.operand_mappings) != 2
            or any(p is None for p in projections)
            or not _summed_and_sliced(rule, result_axes or {}, devices, projections)):
        return None
    contracted = set(rule.reduction_factors)
    covering = []
    for tensor, proj in zip(operands, projections):
        axes = [a for f, record in proj.factors.items() if f in contracted
                for a in record[AXES]]
        if axes and size_product(axes) == devices:
            covering.append((tensor.global_bytes, proj))
    if len(covering) == 2:
        return covering[0][1] if covering[0][0] > covering[1][0] else covering[1][1]
    if not covering:
        return None
    # The other operand splits each contraction factor as the covering one or not at
    # all; one it splits otherwise ([{"data"}] against [{"data", "model"}]) takes the
    # last resort instead (both gathered, checked on XLA:CPU).
    own = covering[0][1].factors
    other = next(p for p in projections if p is not covering[0][1]).factors
    for factor in contracted:
        axes = other[factor][AXES] if factor in other else ()
        if axes and (factor not in own or tuple(own[factor][AXES]) != tuple(axes)):
            return None
    return covering[0][1]


def _covered(rule: OpShardingRule, operands: Sequence[Tensor], results: Sequence[Tensor],
             mesh) -> bool:
    """Whether a dot operand's contraction covers the devices (``_covering_operand``)."""
    if len(operands) != 2 or any(t.sharding is None for t in operands):
        return False
    projections = [project(t.sharding, m, rule.factor_sizes)
                   for t, m in zip(operands, rule.operand_mappings)]
    return _covering_operand(rule, operands, projections, _devices(mesh),
                             _result_factor_axes(rule, results)) is not None


def _summed_and_sliced(rule: OpShardingRule, result_axes: dict[int, tuple],
                       devices: int, projections) -> bool:
    """Whether XLA's dot handler reaches the covering operand's case for a result
    sharded ``result_axes``: replicated, or split on non-contracting dimensions
    whose axes on one operand's side alone do not cover every device (it sums the
    partial products and slices them: an all-reduce of the whole result over the axes
    the result is split on, then of the slice over the others, ``dot_partial_sums``).
    A result one side's dimensions tile over every device is partitioned on that
    side first (its contraction gathered), and so is one split on a dimension an
    operand splits too (XLA groups on that operand's split first: an FSDP weight
    ``[{"data", "model"}, {}]`` under activations and a result ``[{"data"}, {}]`` is
    gathered whole); a sharded batch dimension is another case, not modelled so."""
    sides = [{f for dim in m for f in dim} for m in rule.operand_mappings]
    for factor, axes in result_axes.items():
        if axes and factor in sides[0] and factor in sides[1]:
            return False
    for side in (0, 1):
        own = sides[side] - sides[1 - side]
        held = [a for f in own for a in result_axes.get(f, ())]
        if held and size_product(held) == devices:
            return False
        split = projections[side].factors
        if any(result_axes.get(f) and f in split and split[f][AXES] for f in own):
            return False
    return True


def _grouping_moves_other(rule: OpShardingRule, projections,
                          result_axes: dict[int, tuple]) -> bool:
    """Whether XLA groups a dot on one operand's non-contracting axes (they split it
    as the result does) while the other operand holds some of those axes: it then
    moves that operand (``dot_groups``), which may line up the contraction's tiles."""
    factors = [{f for dim in m for f in dim} for m in rule.operand_mappings]
    if len(factors) != 2 or any(p is None for p in projections):
        return False
    for side in (0, 1):
        own = factors[side] - factors[1 - side]
        held = projections[side].factors
        group = [a for f in own if result_axes.get(f) and f in held
                 and held[f][AXES] == result_axes[f] for a in result_axes[f]]
        other = {a for record in projections[1 - side].factors.values() for a in record[AXES]}
        if group and any(overlaps(a, b) for a in group for b in other):
            return True
    return False


def _group_elements(rule: OpShardingRule, mapping, shape: Sequence[int] | None,
                    axes: Sequence[AxisRef], grouped: set[AxisRef]) -> int:
    """Elements of a tensor (``mapping``, its ``axes``) inside one device group: of
    its ``shape`` where known (a convolution's factors need not cover a dilated or
    strided dimension), else of its factors."""
    count = 1
    if shape is not None:
        for size in shape:
            count *= size
    else:
        for dim in mapping:
            for factor in dim:
                count *= rule.factor_sizes[factor]
    return count // size_product([a for a in axes if a in grouped])


def _partial_sums_pay(rule: OpShardingRule, factor: int, projections,
                      grouped: set[AxisRef], result_axes: dict[int, tuple],
                      shapes: tuple[list, tuple] | None = None) -> bool:
    """Whether XLA keeps a dot's contraction sharded inside its device groups when
    one operand holds it sharded and the other operand and the result are
    replicated there (``PartitionBaseCase``, "we compare the cost of all-gather
    on RHS vs all-reduce on the output"): only when the sharded operand has more
    elements in a group than the result; otherwise it all-gathers that operand."""
    held_by_result = [a for want in result_axes.values() for a in want]
    if any(a not in grouped for a in held_by_result):
        return True  # the result is sharded inside the groups: another case
    operand_shapes, result_shape = shapes or ([None] * len(projections), None)
    sharded, replicated = [], []
    for proj, mapping, shape in zip(projections, rule.operand_mappings, operand_shapes):
        if not any(factor in dim for dim in mapping):
            continue
        if proj is None:
            return True  # unknown
        held = factor in proj.factors and proj.factors[factor][AXES]
        (sharded if held else replicated).append((proj, mapping, shape))
    if len(sharded) != 1 or len(replicated) != 1:
        return True
    if any(a not in grouped for record in replicated[0][0].factors.values()
           for a in record[AXES]):
        return True  # the other operand is sharded inside the groups: another case
    proj, mapping, shape = sharded[0]
    held_by_operand = [a for record in proj.factors.values() for a in record[AXES]]
    return (_group_elements(rule, mapping, shape, held_by_operand, grouped)
            > _group_elements(rule, rule.result_mappings[0], result_shape, held_by_result,
                              grouped))


def _group_bytes(tensor: Tensor, proj, factor: int, result_axes: dict[int, tuple] | None) -> int:
    """``tensor``'s bytes inside one device group of a dot: XLA first groups on the
    dimensions an operand splits as the result does, and inside the groups it reshards
    the operand with fewer bytes there to line up the contraction (``PartitionBaseCase``
    on the per-group shapes)."""
    grouped = [a for other, record in proj.factors.items()
               if other != factor and result_axes and other in result_axes
               for a in record[AXES] if a in result_axes[other]]
    return tensor.global_bytes // size_product(grouped)


def _reduction_axes(rule: OpShardingRule, operands: Sequence[Tensor],
                    used: set[AxisRef], devices: int | None = None,
                    result_axes: dict[int, tuple] | None = None,
                    result_shape: tuple | None = None) -> dict[int, tuple]:
    """Per reduction factor, the axes the op computes partial sums over.

    When every operand carrying the factor is sharded the same way along it,
    XLA keeps that sharding (a local dot, then an all-reduce and a slice of
    the result). Otherwise the largest operand sharded along it wins, minus
    axes the result already uses elsewhere.

    With ``devices`` (the mesh's device count), a factor contracted between
    several operands (a dot) follows XLA's dot handler: when another operand
    carrying it is unsharded along it, or sharded over a different number of
    tiles (so no collective-permute can line the two up), XLA keeps the
    contraction sharded only if its axes, times the result axes the operands
    already hold on the same factors (the dimensions it groups on first),
    cover every device (``PartitionBaseCase``), and, where the other operand
    and the result are replicated inside those groups, only if the sharded
    operand has more elements there than the result (``_partial_sums_pay``).
    Where an operand's contraction factors alone are split over every device
    (``_covering_operand``: the larger where both are) and the result is
    replicated or split on few enough of the non-contracting dimensions
    (``_summed_and_sliced``), the other is resharded to match it and every
    contraction is partitioned as that operand holds it (``PartitionBaseCase``).
    Where both operands split it, into different tile counts, and no grouping
    on a non-contracting split moves either first, it never does (its last
    resort reshards the operands to what the result implies). Otherwise it
    replicates the operands along the factor (all-gathers) and the factor
    stays unsharded.
    """
    chosen: dict[int, tuple] = {}
    projections = [
        project(t.sharding, m, rule.factor_sizes) if t.sharding is not None else None
        for t, m in zip(operands, rule.operand_mappings)
    ]
    covering = _covering_operand(rule, operands, projections, devices, result_axes)
    for factor in rule.reduction_factors:
        if covering is not None:
            # Partitioned as the covering operand holds it, its other axes included:
            # XLA sums over them and slices the result afterwards.
            record = covering.factors.get(factor)
            chosen[factor] = tuple(record[AXES]) if record is not None else ()
            continue
        seen = [proj.factors[factor][AXES] for proj in projections
                if proj is not None and factor in proj.factors]
        if seen and seen[0] and all(axes == seen[0] for axes in seen):
            chosen[factor] = tuple(seen[0])
            continue
        best: tuple[int, tuple] = (-1, ())
        for tensor, proj in zip(operands, projections):
            if proj is None or factor not in proj.factors:
                continue
            # An axis the result uses only part of stays gathered: XLA cannot sum
            # partial results over it and keep the result sliced on its sub-axis.
            axes = tuple(a for a in proj.factors[factor][AXES] if a not in used
                         and not any(overlaps(a, u) for u in used))
            weight = _group_bytes(tensor, proj, factor, result_axes)
            if axes and weight > best[0]:
                best = (weight, axes)
        if devices is not None and best[1] and not _contraction_partitions(
                rule, factor, projections, best[1], devices, result_axes,
                ([t.shape for t in operands], result_shape)):
            best = (best[0], ())
        chosen[factor] = best[1]
    return chosen


def computation_axes(rule: OpShardingRule, operands: Sequence[Tensor],
                     results: Sequence[Tensor], mesh=None
                     ) -> tuple[dict[int, tuple], dict[int, tuple]]:
    """The axes XLA computes an op over: ``(factor_axes, reduction)``.

    ``factor_axes`` maps each factor to the axes it is sharded over while the
    op runs: the results' axes, then the reduction factors' axes (a result
    axis also used for partial sums is dropped: XLA reduces first and slices
    the result afterwards). ``reduction`` maps each reduction factor to the
    axes the op computes partial sums over (empty: none), as
    ``_reduction_axes`` chooses them; ``mesh`` as in ``op_communication``.
    """
    factor_axes = _result_factor_axes(rule, results)
    used = {axis for axes in factor_axes.values() for axis in axes}
    reduction = _reduction_axes(rule, operands, used, _devices(mesh), factor_axes,
                                results[0].shape if results else None)
    reduced = {axis for axes in reduction.values() for axis in axes}
    if reduced & used:  # partial sums first, the result is sliced afterwards
        factor_axes = {f: tuple(a for a in axes if a not in reduced)
                       for f, axes in factor_axes.items()}
    factor_axes.update(reduction)
    return factor_axes, reduction


def required_sharding(rule: OpShardingRule, index: int, operand: Tensor,
                      factor_axes: dict[int, tuple]) -> TensorSharding | None:
    """The sharding operand ``index`` must have for the op to need no reshard."""
    if operand.sharding is None:
        return None
    mapping = rule.operand_mappings[index]
    if len(operand.sharding.dims) != len(mapping):
        return None
    own = project(operand.sharding, mapping, rule.factor_sizes)
    need_replication = set(rule.need_replication_factors)
    dims = []
    for dim_factors in mapping:
        axes: list[AxisRef] = []
        for factor in dim_factors:
            if factor in need_replication:
                found: Sequence[AxisRef] = ()
            elif factor in factor_axes:
                found = factor_axes[factor]
            else:
                found = own.factors[factor][AXES]
            axes.extend(found)
            if size_product(found) < rule.factor_sizes[factor]:
                # A factor not split over all its extent ends what the dimension can
                # hold: a minor factor's axes would split this one instead (heads of
                # a fused qkv projection), so that part is gathered and sliced.
                break
        dims.append(DimSharding(tuple(axes), True))
    return TensorSharding(operand.sharding.mesh, tuple(dims))


def dims_text(sharding: TensorSharding | None) -> str:
    """``[{"x"}, {}]``: the dimension shardings without mesh, closedness or lists."""
    if sharding is None:
        return "[unknown]"
    return "[" + ", ".join("{" + ", ".join(map(str, d.axes)) + "}" for d in sharding.dims) + "]"


def sliced_further(computed: Sequence[DimSharding], wanted: Sequence[DimSharding]) -> bool:
    """Whether a result computed with ``computed``'s dimension shardings reaches
    ``wanted`` by slicing alone (each dimension's axes among the wanted ones): the op
    model already reduces its partial sums first and slices after (a reduce-scatter
    where the platform forms one), with no reshard of its own."""
    return all(set(c.axes) <= set(w.axes) for c, w in zip(computed, wanted))


def op_communication(rule: OpShardingRule, operands: Sequence[Tensor],
                     results: Sequence[Tensor], mesh=None, *,
                     op_name: str | None = None, unused: frozenset[int] = frozenset()
                     ) -> list[OpCommunication]:
    """The collectives XLA needs around one op (empty when results are unsharded).

    ``mesh`` (a ``MeshInfo`` or (axis, size) pairs, major to minor) gives the
    device count and order: the reshards then follow the mesh's device order
    exactly, and a dot contracting over part of the mesh is gathered as XLA
    does (``_reduction_axes``). Without it every contraction keeps its
    sharding and the device order is guessed from the axes named. An op
    named in ``XLA_REPLICATED_OPS`` (``op_name``) gathers every operand whole
    and slices its result for free. The results numbered in ``unused`` have no
    readers: XLA drops their reshards with them.
    """
    if all(r.sharding is None for r in results):
        return []
    replicated = xla_replicates(op_name)
    gathers_partials = op_name == VARIADIC_REDUCE and len(results) > 1
    reduce = op_name == REDUCE
    dot = op_name == "stablehlo.dot_general"
    elementwise = op_name in ELEMENTWISE and len(operands) > 1
    reshape = op_name == RESHAPE
    custom_call = op_name == UNPARTITIONED_CUSTOM_CALL
    groups_gathered = op_name == GATHERED_BATCH_GROUPS
    convolution = op_name in (CONVOLUTION, GATHERED_BATCH_GROUPS)
    rules = active_rules()
    if dot and rules.dot_operands_moved_as:
        operands = [rules.dot_operand(t) for t in operands]
    # Models repeat ops with equal shardings (layers): the answer depends on nothing else
    # but the platform (its bytes per element in collectives).
    key = (rule, tuple(operands), tuple(results),
           mesh.key if isinstance(mesh, MeshInfo) else (tuple(mesh) if mesh else None),
           replicated, gathers_partials, reduce, dot, custom_call, convolution, elementwise,
           reshape, groups_gathered, unused, rules)
    found = _memo.get(key)
    if found is None:
        if len(_memo) >= _MEMO_LIMIT:
            _memo.clear()
        found = _memo[key] = tuple(_op_communication(rule, operands, results, mesh,
                                                     replicated, gathers_partials, reduce, dot,
                                                     custom_call, convolution, elementwise,
                                                     reshape, groups_gathered, unused))
    return list(found)


def _windowed(rule: OpShardingRule, over: Sequence[AxisRef], collective: Collective,
              reason: str) -> tuple[Collective, str]:
    """A dot's reduce-scatter as the platform runs it: a windowed loop of
    collective-permutes where its contraction is long (``PlatformRules.
    windowed_reduce_scatter``), else unchanged."""
    contraction = 1
    for factor in rule.reduction_factors:
        contraction *= rule.factor_sizes[factor]
    windowed = active_rules().windowed_reduce_scatter(contraction, size_product(over),
                                                      collective.bytes_per_device)
    if windowed is None:
        return collective, reason
    return (Collective(COLLECTIVE_PERMUTE, collective.axes, windowed),
            reason + ", reduce-scattered by a windowed loop of collective-permutes")


def _gathered_whole(operand: Tensor, needed: TensorSharding, mesh,
                    collectives: list[Collective] | None = None) -> tuple | None:
    """The unsharded dimensions where XLA reaches ``needed`` by gathering ``operand``
    whole and slicing it (its reshard then caches the whole value for later readers);
    None otherwise."""
    whole = needed._replace(dims=tuple(DimSharding((), True) for _ in needed.dims))
    if collectives is None:
        collectives = reshard_tensor(operand, needed, mesh)
    if (not collectives or needed == whole
            or any(c.kind != ALL_GATHER for c in collectives)
            or collectives != reshard_tensor(operand, whole, mesh)):
        return None
    return tuple(d.axes for d in whole.dims)


_memo: dict[tuple, tuple[OpCommunication, ...]] = {}
_MEMO_LIMIT = 16384


def _op_communication(rule: OpShardingRule, operands: Sequence[Tensor],
                      results: Sequence[Tensor], mesh, replicated: bool,
                      gathers_partials: bool = False, reduce: bool = False,
                      dot: bool = False, custom_call: bool = False,
                      convolution: bool = False,
                      elementwise: bool = False,
                      reshape: bool = False,
                      groups_gathered: bool = False,
                      unused: frozenset[int] = frozenset()) -> list[OpCommunication]:
    declared = results
    computed_as = "reduced as its operand is sharded"
    if reduce and not replicated:
        # XLA's reduce handler reduces its operands as the first one is sharded and
        # reshards the result it gets to the declared one afterwards (checked on
        # XLA:CPU: a row sum of [{"model"}, {}] declared [{"data"}] permutes the sums).
        results = _reduced_as_operand(rule, operands[0], results, gathers_partials)
    if elementwise:
        # XLA's elementwise handler computes an op whose operands all share one
        # sharding in that sharding and reshards the result, one reshard where
        # resharding the operands would take one each (checked on XLA:CPU: x * y of
        # [{"x"}, {"y"}, {}] declared [{"x"}, {}, {}] all-gathers the product once).
        results = _computed_as_operands(operands, results)
        computed_as = "computed as its operands are all sharded"
    if reshape:
        # XLA's reshape handler reshards the operand to what the declared result
        # implies when that is a sharding of the operand; when it is not (4 heads on
        # a 16-device axis: padded tiles) it reshapes the operand as it is sharded and
        # reshards the result (checked on XLA:CPU: a [.., 64] on "model"=16 reshaped
        # to 4 x 16 declared [{"model"}, {}] gathers the heads and slices them).
        results = reshaped_as_operand(rule, operands[0], results)
        computed_as = "reshaped as its operand is sharded"
    if groups_gathered:
        results = _groups_whole(rule, results)
        computed_as = "computed with its batch groups whole"
    if replicated:
        factor_axes, reduction = dict.fromkeys(range(len(rule.factor_sizes)), ()), {}
    else:
        # A variadic reduce reshards its other inputs as the first one is sharded.
        inputs = ([operands[0]] * len(results) + list(operands[len(results):])
                  if gathers_partials else operands)
        factor_axes, reduction = computation_axes(rule, inputs, results, mesh)
    in_results = {f for mapping in rule.result_mappings for dim in mapping for f in dim}
    if custom_call and rule.is_custom:
        factor_axes.update((f, ()) for mapping in rule.operand_mappings for dim in mapping
                           for f in dim if f not in in_results
                           and f not in rule.reduction_factors)
    # A dimension of size one that the op drops (a reshape's squeeze) holds its one
    # element on one device of its axes: XLA replicates it first (an all-reduce of
    # the zero-padded shards; checked on XLA:CPU: x[:, 0] of a dimension sharded on
    # an axis or a sub-axis).
    factor_axes.update((f, ()) for f, size in enumerate(rule.factor_sizes)
                       if size == 1 and f not in in_results and f not in rule.reduction_factors)
    # A dot (or convolution) grouped on one operand's non-contracting axes first moves
    # the other operand onto devices where every group holds all of it (dot_groups).
    # (Not where an operand covers the devices: that case comes first.)
    regrouped = (None if replicated or mesh is None or _covered(rule, operands, results, mesh)
                 else regrouped_operand(rule, operands, results, mesh_axes(mesh), convolution))
    if regrouped is not None:
        # Inside the groups XLA partitions the dot on the moved operand: a contraction
        # it now holds sharded on free axes may stay sharded (partial sums).
        moved = [replace(t, sharding=regrouped.sharding) if i == regrouped.operand else t
                 for i, t in enumerate(operands)]
        factor_axes, reduction = computation_axes(rule, moved, results, mesh)
    matching = (matching_operand(rule, operands, results, convolution)
                if (dot or convolution) and not replicated else None)
    over = tuple(axis for axes in reduction.values() for axis in axes)
    reduces_per_dim = reduce and not gathers_partials
    out: list[OpCommunication] = []
    for index, operand in enumerate(operands):
        needed = required_sharding(rule, index, operand, factor_axes)
        if needed is None:
            continue
        # The target stays where the operand ends up, also for the move: callers key
        # reuse and explicit reshards on it.
        target = tuple(d.axes for d in needed.dims)
        groups = matching[1] if matching is not None and matching[0] == index else ()
        reuse = None
        if regrouped is not None and regrouped.operand == index:
            moved = regrouped.sharding
            whose = ("the other operand's non-contracting" if regrouped.on == "non-contracting"
                     else "the result's batch")
            reason = (f"sharded {dims_text(operand.sharding)}, the dot groups on {whose} "
                      f"axes and first moves it to {dims_text(moved)}")
            moved_dims = tuple(d.axes for d in moved.dims)
            for collective in reshard_tensor(operand, moved, mesh):
                out.append(OpCommunication(index, reason, collective, target, groups,
                                           reuse=moved_dims))
            operand = replace(operand, sharding=moved)
            reuse = (moved_dims, _gathered_whole(operand, needed, mesh) or target)
        collectives = reshard_tensor(operand, needed, mesh)
        if reuse is None and collectives:
            reuse = _gathered_whole(operand, needed, mesh, collectives)
        for collective in collectives:
            reason = (f"sharded {dims_text(operand.sharding)}, the op needs "
                      f"{dims_text(needed)}")
            out.append(OpCommunication(index, reason, collective, target, groups, reuse=reuse))
    if over:
        devices = prod(size for _, size in mesh_axes(mesh)) if mesh is not None else None
        for result in results:
            if dot:
                # XLA's partitioner windows a dot's reduce-scatter before the platform
                # forms the reduce-scatters it keeps, for their shapes.
                for step, collective in dot_partial_sums(
                        result, [axes for axes in reduction.values() if axes], shaped=False,
                        devices=devices):
                    reason = ("partial sums of a reduction sharded over "
                              + ", ".join(map(str, step)))
                    if collective.kind == COLLECTIVE_PERMUTE:
                        reason += ", summed on the result's replicas and moved to its devices"
                    if collective.kind == REDUCE_SCATTER:
                        collective, reason = _windowed(rule, step, collective, reason)
                    if collective.kind == REDUCE_SCATTER:
                        collective = all_reduce(result, step)
                    out.append(OpCommunication(None, reason, collective))
                    out += _halo(collective, result, step)
                continue
            collective = all_reduce(result, over)
            if reduces_per_dim:
                # XLA's reduce handler all-reduces each sharded reduced dimension on
                # its own, minor-most first, every time the whole (reduced) buffer.
                for factor in sorted(reduction, reverse=True):
                    if reduction[factor]:
                        reason = ("partial sums of a reduction sharded over "
                                  + ", ".join(map(str, reduction[factor])))
                        out.append(OpCommunication(None, reason, replace(
                            collective, axes=axis_names(reduction[factor]))))
                continue
            if gathers_partials:
                collective = Collective(ALL_GATHER, collective.axes,
                                        collective.bytes_per_device * size_product(over))
                reason = ("partial results of a variadic reduce gathered over "
                          + ", ".join(map(str, over)))
            else:
                reason = "partial sums of a reduction sharded over " + ", ".join(map(str, over))
            out.append(OpCommunication(None, reason, collective))
            out += _halo(collective, result, over)
    for index, (computed, wanted) in enumerate(zip(results, declared)):
        if computed is wanted or index in unused:
            continue
        reason = (f"{computed_as}, {dims_text(computed.sharding)}, "
                  f"then resharded to {dims_text(wanted.sharding)}")
        source = tuple(d.axes for d in computed.sharding.dims)
        out.extend(OpCommunication(None, reason, collective, source=source)
                   for collective in reshard_tensor(computed, wanted.sharding, mesh))
    return out


def _halo(collective: Collective, result: Tensor, over: Sequence[AxisRef]
          ) -> list[OpCommunication]:
    """The permute completing ``collective``, a reduce-scatter the platform pads
    (``reshard.reduce_scatter_halo``); none for another collective."""
    if collective.kind != REDUCE_SCATTER:
        return []
    halo = reduce_scatter_halo(result, over)
    return [] if halo is None else [OpCommunication(None, HALO_REASON, halo)]


def _reduced_as_operand(rule: OpShardingRule, operand: Tensor, results: Sequence[Tensor],
                        gathers_partials: bool = False) -> list[Tensor]:
    """``results`` sharded as a reduce of ``operand`` leaves them: its axes on the
    dimensions kept. A result holding at least those axes stays the same object (the
    partial sums are reduced and sliced), unless the reduce ``gathers_partials``: its
    partial results then stay where the operand is sharded."""
    if operand.sharding is None or len(operand.sharding.dims) != len(rule.operand_mappings[0]):
        return list(results)
    axes = projected_axes(operand.sharding, rule.operand_mappings[0], rule.factor_sizes)
    out = []
    for result, mapping in zip(results, rule.result_mappings):
        if result.sharding is None:
            out.append(result)
            continue
        dims = tuple(DimSharding(tuple(a for f in dim for a in axes.get(f, ())), True)
                     for dim in mapping)
        kept = dims == result.sharding.dims or (not gathers_partials
                                                 and sliced_further(dims, result.sharding.dims))
        out.append(result if kept else replace(result, sharding=result.sharding._replace(dims=dims)))
    return out


def _groups_whole(rule: OpShardingRule, results: Sequence[Tensor]) -> list[Tensor]:
    """``results`` without the axes of the factors both operands share with them
    outside the reduction (a convolution's batch groups)."""
    lhs, rhs = ({f for dim in mapping for f in dim} for mapping in rule.operand_mappings[:2])
    groups = (lhs & rhs) - set(rule.reduction_factors)
    out = []
    for result, mapping in zip(results, rule.result_mappings):
        if result.sharding is None or len(result.sharding.dims) != len(mapping):
            out.append(result)
            continue
        axes = projected_axes(result.sharding, mapping, rule.factor_sizes)
        dims = tuple(DimSharding(tuple(a for f in dim if f not in groups for a in axes.get(f, ())),
                                 True) for dim in mapping)
        out.append(result if dims == result.sharding.dims
                   else replace(result, sharding=result.sharding._replace(dims=dims)))
    return out


def _computed_as_operands(operands: Sequence[Tensor], results: Sequence[Tensor]
                          ) -> list[Tensor]:
    """``results`` sharded as the operands are where all of them share one sharding
    (a result that reaches its declared sharding by slicing alone stays the same
    object: resharding the operands to it moves nothing either)."""
    first = operands[0].sharding
    axes = None if first is None else [d.axes for d in first.dims]
    if axes is None or any(o.sharding is None or [d.axes for d in o.sharding.dims] != axes
                           for o in operands[1:]):
        return list(results)
    return [result if result.sharding is None or len(result.sharding.dims) != len(first.dims)
            or sliced_further(first.dims, result.sharding.dims)
            else replace(result, sharding=result.sharding._replace(dims=first.dims))
            for result in results]


def _tiles_evenly(rule: OpShardingRule, proj, mapping) -> bool:
    """Whether every factor of the tensor (``mapping``, projected to ``proj``) splits
    into whole tiles: none lost to an overflow, each one's size a multiple of its
    axes' size."""
    factors = [f for dim in mapping for f in dim]
    return all(f in proj.factors and not proj.factors[f][OVERFLOW]
               and rule.factor_sizes[f] % size_product(proj.factors[f][AXES]) == 0
               for f in factors)


def reshaped_as_operand(rule: OpShardingRule, operand: Tensor, results: Sequence[Tensor]
                         ) -> list[Tensor]:
    """A reshape's result sharded as its operand leaves it, where the declared result
    sharding is no sharding of the operand (it does not tile the factors evenly) and
    the operand's is one of the result (each result dimension's factors, major to
    minor, sharded whole before a minor one is sharded at all); ``results`` otherwise."""
    result = results[0]
    if operand.sharding is None or result.sharding is None:
        return list(results)
    mapping = rule.result_mappings[0]
    if _tiles_evenly(rule, project(result.sharding, mapping, rule.factor_sizes), mapping):
        return list(results)
    own = project(operand.sharding, rule.operand_mappings[0], rule.factor_sizes)
    if not _tiles_evenly(rule, own, rule.operand_mappings[0]):
        return list(results)
    axes = {f: tuple(record[AXES]) for f, record in own.factors.items()}
    dims = []
    for dim in mapping:
        split = False  # a more major factor of this dimension is split only partly
        for factor in dim:
            if axes.get(factor) and split:
                return list(results)
            split = split or size_product(axes.get(factor, ())) < rule.factor_sizes[factor]
        dims.append(DimSharding(tuple(a for f in dim for a in axes.get(f, ())), True))
    return [replace(result, sharding=result.sharding._replace(dims=tuple(dims)))]
