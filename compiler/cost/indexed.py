"""The collectives of a gather or scatter, following XLA's SPMD gather/scatter handler.

XLA does not partition a gather or scatter factor by factor. Its handler
(``gather_scatter_handler.cc``) tries partitioning methods, each of which
groups the devices on some mesh axes and recurses inside each group:

* **explicit batch**: the operand and indices share sharded batching dims;
* **operand pass-through**: the operand is sharded on offset (window) dims
  that the slices keep whole; the output (scatter: the updates) takes the
  same axes there, the indices are replicated across the groups;
* **trivially sliced**: the operand is sharded on a dim sliced with size 1
  (gather collapsed dims, scatter inserted dims); each device masks the
  indices outside its range, and a gather all-reduces its partial output;
* **index pass-through**: the indices are sharded on batch dims; the
  operand is replicated across the groups. A scatter whose combiner is a
  plain reduction (add, max...) scatters into its operand replicated
  across the groups and all-reduces it, in-group tiles kept (below); a
  constant or broadcast scalar operand (the zeros of a gradient) is
  rebuilt there without moving data.

Each method is costed by a dry run without recursion (inside the groups
everything is replicated) and the methods are tried by (peak memory,
communication); explicit batch is the preferred method and costs zero.
A tensor that must be replicated across the groups but is sharded on the
group axes keeps as many tiles as the in-group axes can hold
(``GroupShardingOnReplicatedDim``): indices ``[{"data"}]`` grouped on
``data`` of a 4x2 mesh become ``[{"model"}]`` (a collective-permute and an
all-gather), then replicated inside the group (another all-gather).

Validated against compiled HLO (jax 0.10.2, XLA:CPU, 8 devices) on the
zoo's embedding lookups and their gradients (``bench/zoo/lm_*.py``) and the
gather/scatter cases of ``bench/cost_model.py``; see docs/cost-model.md.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from math import prod

from shardc.compiler.cost.op_comm import HALO_REASON, OpCommunication, dims_text
from shardc.compiler.cost.platforms import active_rules
from shardc.compiler.cost.reshard import (
    Collective,
    all_reduce,
    collective_element_bytes,
    reduce_scatter_halo,
    reshard_tensor,
)
from shardc.compiler.propagation.projection import projected_axes
from shardc.compiler.sharding.axes import AxisRef
from shardc.compiler.sharding.rule import OpShardingRule
from shardc.compiler.sharding.rules.indexing import IndexedRoles
from shardc.compiler.sharding.tensor import DimSharding, MeshInfo, Tensor, TensorSharding

FactorAxes = dict[int, tuple[AxisRef, ...]]
_BIG = 1 << 62  # a method that does not apply


@dataclass(frozen=True)
class _Classes:
    """The factor classes of an indexed op, read off its rule through its roles."""

    parallel: tuple[int, ...]  # operand, indices and slices: explicit batch dims
    operand_passthrough: tuple[int, ...]  # operand and slices, whole windows
    trivial: tuple[int, ...]  # operand only: dims sliced with size 1
    index_passthrough: tuple[int, ...]  # indices and slices: batch dims
    replicated: frozenset[int]  # must stay unsharded (index vector, partial windows)


@dataclass
class _Plan:
    """Steps of one partitioning: reshards (role, src, dst) and all-reduces (role, fa, axes)."""

    steps: list[tuple] = field(default_factory=list)
    op_fa: dict[str, FactorAxes] = field(default_factory=dict)  # where the op itself runs
    adjusted: int = 0  # bytes of a trivially sliced scatter's indices less each offset


class _Op:
    """One gather or scatter: its tensors by role and their factor axes."""

    def __init__(self, rule: OpShardingRule, roles: IndexedRoles, operands: Sequence[Tensor],
                 results: Sequence[Tensor], mesh: MeshInfo) -> None:
        self.rule, self.roles, self.mesh = rule, roles, mesh
        self.scatter = roles.scatter
        slices = roles.updates[0] if roles.scatter else None
        self.index = {"data": roles.data[0], "indices": roles.indices, "slices": slices,
                      "result": None, "filter": roles.indices}
        indices = operands[roles.indices]
        self.tensors = {"data": operands[roles.data[0]], "indices": indices,
                        "slices": operands[slices] if slices is not None else results[0],
                        "result": results[0],
                        # A trivially sliced gather's mask of the indices out of a
                        # device's range: the indices' shape, of predicates.
                        "filter": replace(indices, element_bytes=1, dtype="i1")}
        self.mappings = {"data": rule.operand_mappings[roles.data[0]],
                         "indices": rule.operand_mappings[roles.indices],
                         "slices": (rule.operand_mappings[slices] if slices is not None
                                    else rule.result_mappings[0]),
                         "result": rule.result_mappings[0],
                         "filter": rule.operand_mappings[roles.indices]}
        self.sizes = {AxisRef(name, 1, size, size): size for name, size in mesh.sizes.items()}

    def factors(self, role: str) -> set[int]:
        return {f for dim in self.mappings[role] for f in dim}

    def axes(self, role: str) -> FactorAxes:
        return projected_axes(self.tensors[role].sharding, self.mappings[role],
                              self.rule.factor_sizes)

    def sharding(self, role: str, fa: FactorAxes) -> TensorSharding:
        mesh = self.tensors[role].sharding.mesh
        return TensorSharding(mesh, tuple(
            DimSharding(tuple(a for f in dim for a in fa.get(f, ())), True)
            for dim in self.mappings[role]))

    def reshard(self, role: str, src: FactorAxes, dst: FactorAxes) -> list[Collective]:
        t = self.tensors[role]
        return reshard_tensor(replace(t, sharding=self.sharding(role, src)),
                              self.sharding(role, dst), self.mesh)

    def shard_bytes(self, role: str, fa: FactorAxes) -> int:
        t = self.tensors[role]
        total = t.element_bytes
        for size, dim in zip(t.shape, self.mappings[role]):
            count = prod(a.size for f in dim for a in fa.get(f, ()))
            total *= -(-size // count)
        return total

    def all_reduce(self, role: str, fa: FactorAxes, over: tuple) -> Collective:
        return all_reduce(replace(self.tensors[role], sharding=self.sharding(role, fa)), over)

    def reduce_scatter_halo(self, role: str, fa: FactorAxes, over: tuple) -> Collective | None:
        return reduce_scatter_halo(
            replace(self.tensors[role], sharding=self.sharding(role, fa)), over)

    def classes(self) -> _Classes:
        data, idx, slices = self.factors("data"), self.factors("indices"), self.factors("slices")
        unit = {f for d in self.roles.unit_slice_dims for f in self.mappings["data"][d]}
        need = set(self.rule.need_replication_factors) - unit
        ordered = range(len(self.rule.factor_sizes))
        return _Classes(
            parallel=tuple(f for f in ordered if f in data and f in idx and f in slices),
            operand_passthrough=tuple(f for f in ordered if f in data and f in slices
                                      and f not in idx and f not in need),
            trivial=tuple(f for f in ordered if f in data and f not in idx
                          and f not in slices and f not in need),
            index_passthrough=tuple(f for f in ordered if f in idx and f in slices
                                    and f not in data and f not in need),
            replicated=frozenset(need))


def _drop(fa: FactorAxes, axes) -> FactorAxes:
    """``fa`` without ``axes`` (and without the sub-axes of those that are whole); an
    axis of ``fa`` holding one of ``axes`` as a sub-axis keeps its other parts."""
    whole = {a.name for a in axes if a.size == a.total}
    return {f: tuple(a for a in v if a not in axes and a.name not in whole)
            for f, v in _split(fa, axes).items()}


def _split(fa: FactorAxes, axes) -> FactorAxes:
    """``fa`` with each axis that strictly holds one of ``axes`` as a sub-axis cut
    around it, major part first: a whole ``"model"`` (4) against ``"model":(1)2``
    is ``"model":(1)2, "model":(2)2``, so that the group's part can be told apart."""
    out: FactorAxes = {}
    for f, v in fa.items():
        parts: list[AxisRef] = []
        for a in v:
            inside = next((g for g in axes if g.name == a.name and g != a
                           and a.pre <= g.pre and g.next <= a.next), None)
            if inside is None:
                parts.append(a)
                continue
            cuts = [AxisRef(a.name, a.pre, inside.pre // a.pre, a.total), inside,
                    AxisRef(a.name, inside.next, a.next // inside.next, a.total)]
            parts.extend(c for c in cuts if c.size > 1)
        out[f] = tuple(parts)
    return out


def _within(axis: AxisRef, axes) -> bool:
    """Whether ``axis`` is one of ``axes`` or a sub-axis of a whole one of them."""
    return axis in axes or any(a.name == axis.name and a.size == a.total for a in axes)


def _without(free: tuple, group: tuple) -> tuple:
    """The axes of ``free`` outside ``group``: an axis some of whose parts the group
    holds (sub-axes ``_regroup`` or ``_borrowed`` kept) leaves the parts around them."""
    out = []
    for axis in free:
        if axis in group:
            continue
        parts = sorted((g for g in group if g.name == axis.name and g.size < axis.size
                        and axis.pre <= g.pre and g.next <= axis.next), key=lambda g: g.pre)
        if not parts:
            out.append(axis)
            continue
        start = axis.pre
        for part in parts:
            if part.pre > start:
                out.append(AxisRef(axis.name, start, part.pre // start, axis.total))
            start = part.next
        if start < axis.next:
            out.append(AxisRef(axis.name, start, axis.next // start, axis.total))
    return tuple(out)


def _keep(fa: FactorAxes, axes) -> FactorAxes:
    return {f: tuple(a for a in v if a in axes) for f, v in fa.items()}


def _regroup(fa: FactorAxes, group: tuple, inner: tuple, priority: Sequence[int]) -> FactorAxes:
    """``fa`` replicated across the ``group`` axes, keeping what tiles the in-group axes can.

    XLA's ``GroupShardingOnReplicatedDim`` lowers the tile count of the
    dims holding group axes, lowest priority first, until the tensor is
    replicated over as many devices as there are groups; the tiles it keeps
    are laid out on the in-group devices.
    """
    fa = _split(fa, group)
    out = _drop(fa, group)
    used = {a for v in out.values() for a in v}
    spare = [a for a in inner if a not in used]
    for f in priority:  # highest priority first
        room = prod(a.size for a in fa.get(f, ()) if a in group)
        for k, axis in enumerate(spare):
            if room <= 1 or axis is None:
                continue
            if room % axis.size == 0:
                out[f] = out.get(f, ()) + (axis,)
                spare[k] = None
                room //= axis.size
            elif axis.size % room == 0:
                # An in-group axis larger than the tiles kept: its major part holds them.
                out[f] = out.get(f, ()) + (AxisRef(axis.name, axis.pre, room, axis.total),)
                spare[k] = AxisRef(axis.name, axis.pre * room, axis.size // room, axis.total)
                room = 1
    return out


def _borrowed(fa: FactorAxes, dims, group: tuple, inner: tuple, lowest: Sequence[int],
              order: Sequence[str]) -> FactorAxes | None:
    """``fa`` replicated across the ``group`` axes where it is replicated over fewer
    devices than there are groups and the groups are the minor devices; None where
    ``_regroup`` answers (enough replication already, or other groups).

    ``GroupShardingOnReplicatedDim`` then borrows the missing replication from the
    tile counts, dimension by dimension from the lowest priority (``lowest``, lowest
    first), one prime factor at a time, and lays the tiles left out on a fresh device
    order: the in-group devices, major first, tile the dims in order (where it
    cannot borrow enough, ``fa`` is replicated across the in-group devices).
    """
    if any(len(dim) != 1 for dim in dims):
        return None
    key = lambda a: (order.index(a.name), a.pre)  # noqa: E731
    if not group or not inner or max(map(key, inner)) > min(map(key, group)):
        return None
    free = (*inner, *group)
    tiles = {dim[0]: prod(a.size for a in fa.get(dim[0], ()) if _within(a, free))
             for dim in dims}
    replicas = prod(a.size for a in free) // prod(tiles.values())
    groups = prod(a.size for a in group)
    if replicas % groups == 0:
        return None
    # The axes of enclosing groups stay where they are.
    outer = {f: kept for f, v in fa.items()
             if (kept := tuple(a for a in v if not _within(a, free)))}
    if groups % replicas or prod(tiles.values()) * replicas % groups:
        return outer
    borrow = groups // replicas
    for f in sorted(tiles, key=lambda f: lowest.index(f) if f in lowest else len(lowest)):
        for prime in _primes(tiles[f]):
            if borrow % prime == 0:
                tiles[f] //= prime
                borrow //= prime
    if borrow != 1:
        return outer
    out = dict(outer)
    spare = sorted(inner, key=key)  # the in-group devices, major first
    for dim in dims:
        f, room = dim[0], tiles[dim[0]]
        while room > 1 and spare:
            axis = spare.pop(0)
            if axis.size <= room:
                if room % axis.size:
                    return None
                out[f] = out.get(f, ()) + (axis,)
                room //= axis.size
            else:
                if axis.size % room:
                    return None
                out[f] = out.get(f, ()) + (AxisRef(axis.name, axis.pre, room, axis.total),)
                spare.insert(0, AxisRef(axis.name, axis.pre * room, axis.size // room,
                                        axis.total))
                room = 1
        if room > 1:
            return None
    return out


def _union(*parts: FactorAxes) -> FactorAxes:
    out: FactorAxes = {}
    for part in parts:
        for f, v in part.items():
            out[f] = out.get(f, ()) + tuple(a for a in v if a not in out.get(f, ()))
    return out


def _primes(n: int) -> list[int]:
    """The prime factors of ``n``, smallest first, with multiplicity."""
    out, p = [], 2
    while n > 1:
        while n % p == 0:
            out.append(p)
            n //= p
        p += 1
    return out


def _merged(indices: FactorAxes, updates: FactorAxes, factors, free: tuple) -> FactorAxes:
    """The indices of a scatter's index pass-through method: their sharding merged
    with the updates' on the pass-through dims, where compatible.

    XLA first reshards the indices to that merge (``MergeShardingIfCompatible``
    of the updates' sharding propagated to the indices): replicated indices take
    the updates' batch axes by slicing, and the method then applies where only
    the updates were sharded (checked on XLA:CPU: a codebook gradient scattered
    from updates [{"x"}, {}, {"y"}] at replicated indices all-reduces over "x").
    """
    used = {a for v in indices.values() for a in v}
    out = dict(indices)
    for f in factors:
        have = indices.get(f, ())
        want = tuple(a for a in updates.get(f, ()) if _within(a, free))
        if want[:len(have)] != have:
            if have[:len(want)] == want:
                continue
            return indices  # incompatible: the merge fails
        extra = want[len(have):]
        if any(a in used for a in extra):
            return indices
        out[f] = want
        used.update(extra)
    return out


def _merge_target(target: FactorAxes, computed: FactorAxes, group: tuple) -> FactorAxes:
    """The in-group output target: ``target`` without the group axes, if compatible.

    ``MergeShardingIfCompatible``: when the requested output uses a group
    axis on another dim than the method puts it, the merge fails and the
    groups compute a replicated output.
    """
    for f, v in target.items():
        if any(a in group and a not in computed.get(f, ()) for a in v):
            return {}
    return _drop(target, group)


class _Partitioner:
    """XLA's method choice and recursion for one gather or scatter."""

    def __init__(self, op: _Op) -> None:
        self.op, self.cls = op, op.classes()

    # --- methods: (name, group axes, new factor axes per role, output axes, partial:
    # the axes of each all-reduce of the partial results) ---
    def methods(self, fa: dict[str, FactorAxes], free: tuple, target: FactorAxes
                ) -> list[tuple]:
        cls, op = self.cls, self.op
        data, idx, sl = fa["data"], fa["indices"], fa["slices"]
        out = []

        def group_of(source: FactorAxes, factors) -> tuple:
            # An axis of size 1 shards nothing: XLA's tile assignment has no dim for it.
            return tuple(a for f in factors for a in source.get(f, ())
                         if _within(a, free) and a.size > 1)

        idx_priority = [*cls.parallel, *cls.index_passthrough]
        data_priority = [*cls.parallel, *cls.operand_passthrough, *cls.trivial]
        inner = lambda g: _without(free, g)  # noqa: E731

        common = tuple(a for f in cls.parallel for a in data.get(f, ())
                       if a in free and a in idx.get(f, ()))
        if common:
            on = {f: tuple(a for a in data.get(f, ()) if a in common) for f in cls.parallel}
            new = dict(fa)
            new["slices"] = _union(_drop(sl, common), on)
            out.append(("batch", common, new, on, ()))
        group = group_of(data, cls.operand_passthrough)
        if group:
            on = {f: tuple(a for a in data.get(f, ()) if a in group)
                  for f in cls.operand_passthrough}
            new = dict(fa)
            new["indices"] = self._regrouped_indices(idx, group, inner(group))
            if op.scatter:
                new["slices"] = _union(_drop(sl, group), on)
            out.append(("operand-passthrough", group, new, on, ()))
        group = group_of(data, cls.trivial)
        if group:
            new = dict(fa)
            new["indices"] = self._regrouped_indices(idx, group, inner(group))
            if not op.scatter and not _sharded(new["indices"]) and _sharded(
                    self._grouped_target(target, group, inner(group))):
                # Indices left replicated in the groups take the requested output's
                # batch axes instead (``GatherIndexShardingFromOutput...``), sliced
                # before the mask is computed (checked on XLA:CPU: replicated indices
                # into a codebook [{"x"}, {"y"}], output [{"x"}, {}, {"y"}], are
                # sliced over "y", masked and gathered back with their mask).
                from_output = {f: target[f] for f in (*cls.parallel, *cls.index_passthrough)
                               if target.get(f)}
                new["indices"] = self._regrouped_indices(from_output, group, inner(group))
            partial = () if op.scatter else _per_dim(op, "data", data, cls.trivial, group)
            if op.scatter:
                new["slices"] = _regroup(sl, group, inner(group), idx_priority)
            out.append(("trivially-sliced", group, new, {}, partial))
        if op.scatter:
            idx = _merged(idx, sl, cls.index_passthrough, free)
        group = group_of(idx, cls.index_passthrough)
        if group:
            on = {f: tuple(a for a in idx.get(f, ()) if a in group)
                  for f in cls.index_passthrough}
            new = dict(fa)
            new["indices"] = idx
            partial: tuple = ()
            reducing = all(f in op.rule.reduction_factors for f in cls.index_passthrough)
            # The operand is replicated across the groups keeping the tiles the
            # in-group axes can hold, also where it is scattered into an identity and
            # summed: the all-reduce moves that in-group shard (on a 4x4x4 mesh, an
            # operand [{"data", "expert"}] indexed on both is summed as [{"model"}]).
            new["data"] = _regroup(data, group, inner(group), data_priority)
            if op.scatter:
                new["slices"] = _union(_drop(sl, group), on)
            if op.scatter and reducing:
                partial = _per_dim(op, "indices", idx, cls.index_passthrough, group)
            out.append(("index-passthrough", group, new, on, partial))
        return out

    def level(self, fa: dict[str, FactorAxes], target: FactorAxes, free: tuple,
              recursive: bool, forced: tuple | None = None,
              outer: FactorAxes | None = None) -> tuple[_Plan, FactorAxes]:
        """Partition with the axes ``free`` still available; the computed output axes.

        ``recursive``: choose among the methods by cost, as XLA does;
        otherwise (XLA's dry run) replicate inside the group. ``forced``:
        the method to dry-run at this level. ``outer``: the gather output
        axes the enclosing levels' groups impose (part of every shard here).
        """
        outer = outer or {}
        if forced is not None:
            candidates = [forced]
        elif recursive:
            candidates = self.methods(fa, free, target)
            if candidates:
                costed = [(self.cost(c, fa, target, free, outer), k)
                          for k, c in enumerate(candidates)]
                candidates = [candidates[min(costed)[1]]]
        else:
            candidates = []
        roles = ("data", "indices", "slices") if self.op.scatter else ("data", "indices")
        plan = _Plan()
        if not candidates:  # replicate inside the group
            new = {role: _drop(v, free) for role, v in fa.items()}
            plan.steps += [("reshard", role, fa[role], new[role]) for role in roles]
            # A gather's output is sharded on the enclosing groups' axes only.
            plan.op_fa = new if self.op.scatter else {**new, "slices": dict(outer)}
            return plan, new["data"] if self.op.scatter else {}
        _name, group, new, on, partial = candidates[0]
        # A splat operand (zeros of a gradient) is rebuilt in the new sharding for free.
        identity = self.op.scatter and bool(partial) and self.op.roles.splat_data
        plan.steps += [("reshard", role, fa[role], new[role]) for role in roles
                       if not (identity and role == "data")]
        inner_free = _without(free, group)
        if self.op.scatter:
            inner_target = _union(_drop(new["data"], inner_free), _keep(target, inner_free))
        elif _name == "trivially-sliced":
            inner_target = self._trivial_target(target, new["indices"], group, inner_free)
        else:
            inner_target = _merge_target(target, on, group)
        sub, computed = self.level(new, inner_target, inner_free, recursive,
                                   outer=_union(outer, on) if not self.op.scatter else None)
        plan.steps += sub.steps
        plan.op_fa = sub.op_fa
        plan.adjusted = sub.adjusted
        if _name == "trivially-sliced" and self.op.scatter:
            # Each device scatters into its own rows at the indices less its offset,
            # a new array of the indices (``subtract_bitcast_fusion``, s32[1024,2] of
            # all-gather.3's s32[8,128,2]): XLA:CPU fuses no producer into a scatter.
            plan.adjusted = max(plan.adjusted, self.op.shard_bytes("indices", new["indices"]))
        if _name == "trivially-sliced" and not self.op.scatter:
            # The mask is computed where the indices are before the groups gather, and
            # resharded to the indices' part of the groups' output to select from it.
            wanted = _union(outer, inner_target)
            plan.steps.append(("reshard", "filter", new["indices"], {
                f: wanted.get(f, ()) for f in self.op.factors("indices")}))
        if not self.op.scatter:
            # Each method ends with ``Reshard(output_sharding)``: the groups' gather
            # is resharded to its in-group target inside the groups (the group axes
            # stay where the method put them) before this level's own reshard.
            held = _union(outer, on)
            plan.steps.append(("reshard", "result", _union(held, computed),
                               _union(held, inner_target)))
            computed = _union(on, inner_target)
        shard = computed if self.op.scatter else _union(outer, computed)
        for over in partial:
            plan.steps.append(("all-reduce", "data" if self.op.scatter else "slices",
                               shard, over))
        return plan, computed

    def _trivial_target(self, target: FactorAxes, indices: FactorAxes, group: tuple,
                        inner: tuple) -> FactorAxes:
        """The in-group output of a trivially sliced gather.

        Unlike the pass-through methods, XLA groups the requested output on
        replicated dims (``GroupShardingOnReplicatedDim``); when that leaves it
        replicated but the indices keep tiles in the group, the output follows
        the indices (``GatherOutputShardingFromIndex``)."""
        cls = self.cls
        grouped = self._grouped_target(target, group, inner)
        if _sharded(grouped):
            return grouped
        return {f: indices.get(f, ()) for f in (*cls.parallel, *cls.index_passthrough)
                if indices.get(f)}

    def _grouped_target(self, target: FactorAxes, group: tuple, inner: tuple) -> FactorAxes:
        """The output a trivially sliced gather is asked for inside its groups
        (``GroupShardingOnReplicatedDim``)."""
        cls = self.cls
        borrowed = self._borrowed(target, group, inner)
        if borrowed is not None:
            return borrowed
        return _regroup(target, group, inner,
                        [*cls.parallel, *cls.index_passthrough, *cls.operand_passthrough])

    def _borrowed(self, target: FactorAxes, group: tuple, inner: tuple) -> FactorAxes | None:
        """The gather output asked for inside the groups where it is replicated over
        fewer devices than there are groups (``_borrowed``): the batch dims lend
        their tiles before the operand's pass-through dims
        (``GatherOutputDimsByPriority``; checked on XLA:CPU: an output
        [{"x"}, {"y"}] of rows sharded on "y" of a 2x4 mesh is computed with its
        columns on "x" inside the "y" groups, an all-to-all from the rows the
        indices pass through)."""
        passthrough = set(self.cls.operand_passthrough)
        dims = self.op.mappings["slices"]
        lowest = sorted((f for dim in dims for f in dim), key=lambda f: f in passthrough)
        return _borrowed(target, dims, group, inner, lowest,
                         list(self.op.mesh.sizes))

    def _regrouped_indices(self, idx: FactorAxes, group: tuple, inner: tuple) -> FactorAxes:
        """The indices replicated across the groups (``GroupShardingOnReplicatedDim``
        with ``GatherIndexDimsByPriority``): the index pass-through dims lend their
        tiles first, in order, then the explicit batch dims (checked on XLA:CPU:
        ids [{"data"}, {"model"}] of a 2x4 mesh, grouped on "model" by a table's
        columns, are looked up as [{}, {"data"}]: an all-to-all, then the
        in-group order's collective-permute)."""
        cls = self.cls
        borrowed = _borrowed(idx, self.op.mappings["indices"], group, inner,
                             [*cls.index_passthrough, *cls.parallel],
                             list(self.op.mesh.sizes))
        if borrowed is not None:
            return borrowed
        return _regroup(idx, group, inner, [*cls.parallel, *cls.index_passthrough])

    def cost(self, candidate, fa, target, free, outer: FactorAxes | None = None
             ) -> tuple[int, int]:
        """XLA's dry-run cost of one method: (peak memory, communication) in bytes.

        Inside an enclosing method's groups (``outer``: the gather output axes
        those groups impose) XLA dry-runs on the per-group shapes: the output
        the method computes is sharded on ``outer`` too before it is resharded
        to ``target``."""
        if candidate[0] == "batch":
            return (0, 0)  # the preferred method
        plan, computed = self.level(fa, target, free, recursive=False, forced=candidate,
                                    outer=outer)
        if not self.op.scatter and outer:
            # The groups' output keeps the enclosing groups' axes: the dry run reshards
            # it inside the groups, not across them.
            computed, target = _union(outer, computed), _union(outer, target)
        plan.steps.append(("reshard", "result", computed, target))
        memory = self.op_memory(plan.op_fa)
        comm = 0
        for collective, extra in self.collectives(plan, native=True):
            memory = max(memory, extra)
            comm += _communication(collective, self.op.mesh)
        return (memory, comm)

    def op_memory(self, op_fa: dict[str, FactorAxes]) -> int:
        roles = ["data", "indices", "slices"]
        total = sum(self.op.shard_bytes(r, op_fa.get(r, {})) for r in roles)
        return total

    def collectives(self, plan: _Plan, native: bool = False):
        """The collectives of ``plan`` with their memory; with ``native``, in the
        tensors' own element bytes, as the partitioner's dry run sizes them (before a
        platform widens a collective's elements, as XLA:CPU does bf16's)."""
        for step in plan.steps:
            if step[0] == "reshard":
                _, role, src, dst = step
                found = self.op.reshard(role, src, dst)
            else:
                _, role, fa, over = step
                found = [self.op.all_reduce(role, fa, over)]
            tensor = self.op.tensors[role]
            moved = collective_element_bytes(tensor.element_bytes, tensor.dtype)
            for c in found:
                if native and moved != tensor.element_bytes:
                    c = replace(c, bytes_per_device=c.bytes_per_device
                                * tensor.element_bytes // moved)
                yield c, (_memory(c, self.op.mesh) if step[0] == "reshard"
                          else c.bytes_per_device)


def _group_size(c: Collective, mesh: MeshInfo) -> int:
    return c.group or prod(mesh.sizes.get(a, 1) for a in c.axes) or 1


def _memory(c: Collective, mesh: MeshInfo) -> int:
    """``SpmdPartitioner::MemoryCostInBytes``: operands plus result (all-reduce in place)."""
    if c.kind == "all-gather":
        return c.bytes_per_device + c.bytes_per_device // _group_size(c, mesh)
    if c.kind == "all-reduce":
        return c.bytes_per_device
    return 2 * c.bytes_per_device


def _communication(c: Collective, mesh: MeshInfo) -> int:
    if c.kind == "all-reduce":
        return 2 * c.bytes_per_device
    if c.kind == "all-gather":
        g = _group_size(c, mesh)
        return c.bytes_per_device * (g - 1) // g
    return c.bytes_per_device


def _sliced_after(fa: FactorAxes, over: tuple, following) -> FactorAxes:
    """The factor axes an all-reduce's result is reduced onto: on a platform that
    forms reduce-scatters (XLA:TPU), those the next step reshards it to when that
    only slices it over axes it was reduced over (a scatter-add's partial sums
    into a table sharded over them: one reduce-scatter); else its own."""
    if not active_rules().forms_reduce_scatter or not following \
            or following[0][:3] != ("reshard", "result", fa):
        return fa
    target = following[0][3]
    kept = {f: tuple(a for a in axes if a not in over) for f, axes in target.items()}
    if _sharded(kept) != _sharded(fa) or _sharded(target) == _sharded(fa):
        return fa
    return target


def _per_dim(op: _Op, role: str, fa: FactorAxes, factors, group: tuple) -> tuple:
    """The axes of ``group`` on each dimension of ``role`` holding ``factors``, minor-most
    dimension first: XLA all-reduces the partial results of a method along each sharded
    dimension on its own (``AllReduceAlongShardingDims``), every time the whole buffer."""
    out = []
    for dim in reversed(op.mappings[role]):
        axes = tuple(a for f in dim if f in factors for a in fa.get(f, ()) if a in group)
        if axes:
            out.append(axes)
    return tuple(out)


def _sharded(fa: FactorAxes) -> FactorAxes:
    return {f: axes for f, axes in fa.items() if axes}


def indexed_communication(rule: OpShardingRule, roles: IndexedRoles,
                          operands: Sequence[Tensor], results: Sequence[Tensor],
                          mesh) -> list[OpCommunication] | None:
    """The collectives XLA's gather/scatter handler emits for one op.

    None where the model does not apply (no known mesh, sub-axes, a scatter
    of several inputs); the caller then uses the factor model
    (``op_comm.op_communication``).
    """
    if not isinstance(mesh, MeshInfo) or mesh.maximal or mesh.empty or len(roles.data) != 1:
        return None
    if any(t.sharding is None for t in [*operands, *results]):
        return None
    # Programs and the cost-aware search's candidates repeat gathers and scatters with
    # equal shardings: the answer depends on nothing else but the platform.
    found = _planned(rule, roles, operands, results, mesh)
    return None if found is None else list(found[0])


def indexed_computed(rule: OpShardingRule, roles: IndexedRoles, operands: Sequence[Tensor],
                     results: Sequence[Tensor], mesh) -> TensorSharding | None:
    """The sharding XLA's gather/scatter handler computes the op's result in, before it
    reshards it to the result's own (``indexed_communication``'s last step); None
    where that model does not apply."""
    found = _planned(rule, roles, operands, results, mesh)
    return None if found is None else found[1]


def adjusted_indices_bytes(rule: OpShardingRule, roles: IndexedRoles,
                           operands: Sequence[Tensor], results: Sequence[Tensor], mesh) -> int:
    """Bytes of the indices a scatter partitioned on its operand's trivially sliced dims
    rewrites, each device's offset subtracted (XLA's
    ``PartitionScatterTrivialSlicedOperandDimensions``), written apart from the indices
    it reads; 0 where no level of the plan slices so, or that model does not apply."""
    found = _planned(rule, roles, operands, results, mesh)
    return 0 if found is None else found[2]


def _planned(rule: OpShardingRule, roles: IndexedRoles, operands: Sequence[Tensor],
             results: Sequence[Tensor], mesh
             ) -> tuple[tuple[OpCommunication, ...], TensorSharding, int] | None:
    if not isinstance(mesh, MeshInfo) or mesh.maximal or mesh.empty or len(roles.data) != 1:
        return None
    if any(t.sharding is None for t in [*operands, *results]):
        return None
    # Programs and the cost-aware search's candidates repeat gathers and scatters with
    # equal shardings: the answer depends on nothing else but the platform.
    key = (rule, roles, tuple(operands), tuple(results), mesh.key, active_rules())
    if key not in _memo:
        if len(_memo) >= _MEMO_LIMIT:
            _memo.clear()
        _memo[key] = _indexed_communication(rule, roles, operands, results, mesh)
    return _memo[key]


_memo: dict[tuple, tuple[tuple[OpCommunication, ...], TensorSharding, int] | None] = {}
_MEMO_LIMIT = 4096


def _indexed_communication(rule: OpShardingRule, roles: IndexedRoles,
                           operands: Sequence[Tensor], results: Sequence[Tensor],
                           mesh: MeshInfo
                           ) -> tuple[tuple[OpCommunication, ...], TensorSharding, int] | None:
    op = _Op(rule, roles, operands, results, mesh)
    part = _Partitioner(op)
    fa = {role: op.axes(role) for role in ("data", "indices", "slices")}
    target = op.axes("result")
    for v in [*fa.values(), target]:
        if any(a.pre != 1 or a.size != a.total for axes in v.values() for a in axes):
            return None
    start = {role: {f: (() if f in part.cls.replicated else v) for f, v in axes.items()}
             for role, axes in fa.items()}
    free = tuple(sorted(op.sizes, key=lambda a: mesh.order[a.name]))
    plan, computed = part.level(start, target, free, recursive=True)
    steps = [("reshard", role, fa[role], start[role]) for role in fa]
    steps += plan.steps + [("reshard", "result", computed, target)]
    return tuple(_communications(op, steps)), op.sharding("result", computed), plan.adjusted


def _communications(op: _Op, steps) -> list[OpCommunication]:
    out = []
    for k, step in enumerate(steps):
        if step[0] == "all-reduce":
            _, role, fa, over = step
            reason = ("partial sums of an indexed op sharded over "
                      + ", ".join(map(str, over)))
            sliced = _sliced_after(fa, over, steps[k + 1:k + 2])
            out.append(OpCommunication(None, reason, op.all_reduce(role, sliced, over)))
            halo = op.reduce_scatter_halo(role, sliced, over)
            if halo is not None:
                out.append(OpCommunication(None, HALO_REASON, halo))
            continue
        _, role, src, dst = step
        if src == dst:
            continue
        index = op.index.get(role)  # None: the result
        needed = op.sharding(role, dst)
        for collective in op.reshard(role, src, dst):
            if role == "filter":
                reason = (f"the mask of indices out of each device's range, computed "
                          f"{dims_text(op.sharding(role, src))}, selects from the "
                          f"gathered {dims_text(needed)}")
                out.append(OpCommunication(index, reason, collective))
            elif index is None:
                reason = (f"computed {dims_text(op.sharding(role, src))}, "
                          f"declared {dims_text(needed)}")
                source = tuple(d.axes for d in op.sharding(role, src).dims)
                out.append(OpCommunication(None, reason, collective, source=source))
            else:
                reason = (f"sharded {dims_text(op.sharding(role, src))}, the op needs "
                          f"{dims_text(needed)}")
                target = tuple(d.axes for d in needed.dims)
                out.append(OpCommunication(index, reason, collective, target))
    return out
