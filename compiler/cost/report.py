"""The communication report: every reshard point of a module, its collective and bytes.

``comm_report(module)`` reads the shardings the module holds (run
propagation first for a lowered JAX program: unsharded intermediates count
as unknown and need nothing) and lists, per op and source line, the
collectives XLA will need:

* explicit ones: ``sdy.reshard`` / ``sdy.sharding_constraint`` whose operand
  is sharded differently, values returned with another sharding than the
  function result's, operands entering an ``sdy.manual_computation`` with
  another sharding than its in-sharding, and StableHLO collectives written in
  manual bodies (``psum``, ``ppermute``...);
* implicit ones: operands whose sharding differs from what the op's rule
  needs given its result sharding, and sharded reduction factors
  (``op_comm.op_communication``).

Totals per collective kind use the byte measure of
``shardc.runtime.collectives``, so they compare directly with
``Compiled.collectives()``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field, fields, replace
from math import prod

from jaxlib.mlir import ir
from jaxlib.mlir.dialects import stablehlo

from shardc.compiler.cost.custom_partitioning import (
    STABLEHLO_COLLECTIVES,
    custom_partitioned_needs,
    custom_partitioned_results,
    is_custom_partitioned,
)
from shardc.compiler.cost.folded import folded_value, untaken
from shardc.compiler.cost.halos import (
    CONVOLUTION,
    HALO_OPS,
    conv_collectives,
    halo_needs,
    rotate_needs,
    rotated_slice,
    rotation,
    split_conv_all_reduces,
)
from shardc.compiler.cost.heights import block_heights, block_of, gather_reused
from shardc.compiler.cost.indexed import indexed_communication, indexed_computed
from shardc.compiler.cost.moved_tiles import moved_tiles_needs, moves_tiles
from shardc.compiler.cost.op_comm import (
    GATHERED_BATCH_GROUPS,
    RESHAPE,
    UNPARTITIONED_CONVOLUTION,
    VARIADIC_REDUCE,
    OpCommunication,
    dims_text,
    op_communication,
    reshaped_as_operand,
    sliced_further,
)
from shardc.compiler.cost.platforms import (
    active_rules,
    platform_rules,
    predicting_for,
    windowed_bytes,
)
from shardc.compiler.cost.reshard import (
    ALL_GATHER,
    ALL_REDUCE,
    COLLECTIVE_PERMUTE,
    KINDS,
    REDUCE_SCATTER,
    Collective,
    collective_element_bytes,
    dim_axes,
    maximal,
    mesh_axes,
    reshard_tensor,
    shard_bytes,
)
from shardc.compiler.cost.trips import loops_around, runs_per_step, trip_count
from shardc.compiler.cost.windows import window_collectives, window_gather_target
from shardc.compiler.diagnostics import SourceLoc, source_loc_of
from shardc.compiler.propagation.explicit_reshards import DOTS, plan_dot
from shardc.compiler.propagation.manual import MANUAL_OP, erase_manual_axes
from shardc.compiler.propagation.values import ModuleValues, replicated
from shardc.compiler.sharding.axes import size_product
from shardc.compiler.sharding.rules import INDEXED_ROLES, indexed_roles_for
from shardc.compiler.sharding.tensor import MeshInfo, Tensor, TensorSharding

_EXPLICIT = {"sdy.reshard": "explicit reshard", "sdy.sharding_constraint": "sharding constraint"}
_CONSTRAINT = "sdy.sharding_constraint"
MANUAL_RETURN = "sdy.return"
_SELECT = "stablehlo.select"
# Ops ``_found_at`` never prices by their rule.
_NOT_BY_RULE = frozenset({"stablehlo.while", MANUAL_OP, "func.call", *STABLEHLO_COLLECTIVES})


@dataclass(frozen=True)
class CommEntry:
    """One collective at one op: where, why, what and how many bytes per device."""

    op: str
    loc: SourceLoc | None
    reason: str
    kind: str
    axes: tuple[str, ...]
    bytes_per_device: int
    tensor: str
    implicit: bool = True  # False: the program asked for it (reshard, constraint, psum...)
    location: ir.Location | None = field(default=None, compare=False, repr=False)
    # XLA combines this all-reduce into an earlier one of the report (the platform's
    # all-reduce combiner): its bytes count, it adds no collective to the count.
    combined: bool = False
    # times it runs per step: the static trip counts of the loops around it multiplied
    # (None: a loop around it has no static trip count)
    runs: int | None = 1

    def as_dict(self) -> dict:
        """JSON-ready fields (the MLIR location as its file:line:col)."""
        data = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "location"}
        data["loc"] = str(self.loc) if self.loc else None
        return data


@dataclass(frozen=True)
class CommTotal:
    """All predicted collectives of one kind."""

    kind: str
    count: int
    bytes_per_device: int


@dataclass(frozen=True)
class CommReport:
    """Every predicted collective of a module, in program order."""

    entries: tuple[CommEntry, ...]
    notes: tuple[str, ...] = ()

    def totals(self) -> dict[str, CommTotal]:
        """Count and bytes per kind (every kind present, zero when absent)."""
        sums = {kind: [0, 0] for kind in KINDS}
        for entry in self.entries:
            sums[entry.kind][0] += not entry.combined
            sums[entry.kind][1] += entry.bytes_per_device
        return {kind: CommTotal(kind, c, b) for kind, (c, b) in sums.items()}

    def step_totals(self) -> dict[str, CommTotal]:
        """``totals`` per step: a collective in a loop body counts once per iteration
        (``runs``; once where the trip count is not static, as ``notes`` says)."""
        sums = {kind: [0, 0] for kind in KINDS}
        for entry in self.entries:
            runs = entry.runs if entry.runs is not None else 1
            sums[entry.kind][0] += 0 if entry.combined else runs
            sums[entry.kind][1] += runs * entry.bytes_per_device
        return {kind: CommTotal(kind, c, b) for kind, (c, b) in sums.items()}

    def format_text(self) -> str:
        """A human-readable table: one line per collective, then totals per kind."""
        lines = [f"{'kind':<19} {'bytes/dev':>10}  {'axes':<12} {'op':<26} location / reason"]
        for e in self.entries:
            axes = ",".join(e.axes)
            where = f'loc("{e.loc.file}":{e.loc.line}:{e.loc.col})' if e.loc else "loc(unknown)"
            runs = "" if e.runs == 1 else f" (runs x{e.runs if e.runs is not None else '?'})"
            combined = ", combined with an earlier all-reduce" if e.combined else ""
            lines.append(f"{e.kind:<19} {e.bytes_per_device:>10}  {axes:<12} {e.op:<26} "
                         f"{where}: {e.reason} ({e.tensor}){combined}{runs}")
        looped = any(e.runs != 1 for e in self.entries)
        for title, totals in (("totals:" if not looped else "totals (loop bodies once):",
                               self.totals()),
                              *((("totals per step:", self.step_totals()),) if looped else ())):
            lines.append(title)
            for total in totals.values():
                if total.count:
                    lines.append(f"  {total.kind:<19} x{total.count:<4} "
                                 f"{total.bytes_per_device} bytes/dev")
        if not self.entries:
            lines.append("  no communication")
        lines += [f"note: {note}" for note in self.notes]
        return "\n".join(lines) + "\n"

    def to_json(self) -> str:
        """The report as JSON: entries and totals."""
        entries = [e.as_dict() for e in self.entries]
        totals = {k: asdict(t) for k, t in self.totals().items()}
        per_step = {k: asdict(t) for k, t in self.step_totals().items()}
        return json.dumps({"entries": entries, "totals": totals, "step_totals": per_step,
                           "notes": list(self.notes)}, indent=1)


# What one site needs: where, why, which collectives, which tensor (a ``_tensor_text``
# spec: its text prints types, so a caller that only sums bytes never formats it)
# and whether it is implicit.
_Found = tuple[ir.Operation, str, list[Collective], tuple, bool]


def _found(op: ir.Operation, reason: str, collectives, tensor: tuple,
           implicit: bool = True) -> Iterator[_Found]:
    collectives = list(collectives)
    if collectives:
        yield op, reason, collectives, tensor, implicit


def _tensor_text(op: ir.Operation, tensor: tuple) -> str:
    """``("operand", k)`` / ``("result", k)``: that operand of ``op`` with its type;
    ``("type",)``: the type of its result 0; ``()``: nothing."""
    if not tensor:
        return ""
    if tensor[0] == "type":
        return str(op.results[0].type)
    label, k = tensor
    return f"{label} {k} ({op.operands[k].type})"


def collectives_at(reader: ModuleValues, op: int, runs: int | None = 1
                   ) -> Iterator[CommEntry]:
    """The collectives XLA needs at op ``op`` (a graph index) of ``reader``'s module
    (``runs``: how often the op runs per step)."""
    for at, reason, collectives, tensor, implicit in _found_at(reader, op):
        loc, text = source_loc_of(at.location), _tensor_text(at, tensor)
        for c in collectives:
            yield CommEntry(at.name, loc, reason, c.kind, c.axes, c.bytes_per_device, text,
                            implicit, at.location, runs=runs)


def entries_key(reader: ModuleValues, op: int) -> tuple | None:
    """A key of op ``op``, one without an ``op_key``, under which ``collectives_at``
    answers alike at every op and in every copy of these ``reader.costs``: a
    constant's (``_constant_key``, the needs ``_op_needs`` keeps under it) and an
    explicit reshard's (its name, its operand's type and both shardings, interned:
    such a reshard reads nothing else and notes nothing for later ops,
    ``explicit_entries``); None for any other op."""
    graph = reader.graph
    name = graph.op_name[op]
    if reader.costs is None:
        return None
    if name in _CONSTANTS:
        return _constant_key(reader, op)
    if explicit_entries(graph, op):
        value, result = graph.op_operands[op][0], graph.op_results[op][0]
        return (name, graph.value_type_key[value], reader.sharding_id(value),
                reader.sharding_id(result))
    return None


def explicit_entries(graph, op: int) -> bool:
    """Whether op ``op`` is an explicit reshard of its operand (a constraint, a
    ``sdy.reshard``): priced by the reshard of its operand to its result's sharding
    alone, never by its rule."""
    return graph.op_name[op] in _EXPLICIT and bool(graph.op_operands[op])


def collective_bytes_at(reader: ModuleValues, op: int) -> int:
    """The bytes per device of ``collectives_at(reader, op)``, without describing them."""
    if _by_rule(reader.graph, op):  # most ops: summed without generating their finds
        return _rule_bytes(reader, op)
    return sum(c.bytes_per_device for _, _, collectives, _, _ in _found_at(reader, op)
               for c in collectives)


def collective_bytes(reader: ModuleValues) -> int:
    """``collective_bytes_at`` summed over every op of ``reader``'s module, in program
    order (the order ``reader.resharded`` fills in).

    With ``reader.costs``, an op priced by its rule is looked up by its
    ``op_key`` in ``CostMemo.bytes`` (filled where its needs reshard no
    operand, so its bytes do not depend on what earlier ops resharded):
    most ops of most copies, summed without a call per op; the bytes are then
    kept by op in ``reader.priced`` (``BytesByOp``). With ``reader.priced_from``,
    what was kept of another copy of the same read, only the ops whose shardings
    differ from that copy's are priced again (``BytesByOp.reprice``).
    """
    since = reader.priced_from and reader.priced_from.get(BYTES)
    if since is not None and since.holds_for(reader):
        return since.reprice(reader)
    if reader.costs is None:
        return _priced(reader, None)
    kept: dict[int, int] = {}
    total = _priced(reader, None, kept)
    others = [op for op, entry in enumerate(_layout(reader))
              if entry is not None and op not in kept]
    reader.priced[BYTES] = BytesByOp(reader.facts, list(reader.store.sid), total, kept,
                                     sum(kept.values()), others)
    return total


BYTES = "bytes"  # ``collective_bytes``'s part of ``ModuleValues.priced``


@dataclass
class BytesByOp:
    """``collective_bytes`` of one propagated copy, kept by op, so that another copy of
    the same read (the same graph, store slots and ``ModuleValues.facts``: a
    cost-aware candidate, which differs in a few shardings) is priced again only
    where its shardings differ.

    ``kept`` holds the ops looked up in ``CostMemo.bytes`` by a key read from
    the store alone: the same key gives the same bytes without a side effect
    (they reshard no operand, so no later op reads what they resharded), so such
    an op whose slots hold the same sharding ids is not priced again. Every
    other op (a return, a loop's carries, an op whose needs reshard an operand,
    which later ops may reuse) is priced again, in program order.
    """

    facts: dict  # the readers' ``ModuleValues.facts``: one graph and store layout
    sid: list[int]  # the store's sharding ids (``ShardingStore.sid``) when priced
    bytes: int  # ``collective_bytes`` of the copy
    kept: dict[int, int]  # op -> its bytes (see above)
    kept_bytes: int  # their sum
    others: list[int]  # the ops priced again every time, in program order

    def holds_for(self, reader: ModuleValues) -> bool:
        """Whether ``reader`` reads a propagation of the same read (``reprice``)."""
        return (reader.costs is not None and reader.facts is self.facts
                and len(reader.store.sid) == len(self.sid))

    def reprice(self, reader: ModuleValues) -> int:
        """``collective_bytes(reader)``, pricing again only the ops whose slots' sharding
        ids differ from this copy's and the ops priced every time."""
        users = _slot_users(reader)
        kept = self.kept
        total = self.kept_bytes
        again = set(self.others)
        for slot in reader.changed_slots(self.sid):
            for op in users.get(slot, ()):
                if op not in again:
                    again.add(op)
                    total -= kept.get(op, 0)
        return total + _priced(reader, sorted(again))


def _layout(reader: ModuleValues) -> list:
    layout = reader.facts.get("bytes layout")  # the graph's alone: kept with its reader
    if layout is None:
        layout = reader.facts["bytes layout"] = _bytes_layout(reader)
    return layout


def _slot_users(reader: ModuleValues) -> dict[int, list[int]]:
    """Store slot -> the ops ``collective_bytes`` looks up by a key that reads it: the
    graph's alone, kept in ``reader.facts``."""
    users = reader.facts.get("bytes slot users")
    if users is None:
        users = reader.facts["bytes slot users"] = {}
        for op, entry in enumerate(_layout(reader)):
            if isinstance(entry, tuple):
                for slot in entry[2]:
                    users.setdefault(slot, []).append(op)
    return users


def _read_from_store(reader: ModuleValues, part: tuple, sid: list[int]) -> bool:
    """Whether the key of ``part`` (``ModuleValues.key_of_part``) is read from the slots
    it names alone: a value without a sharding there is replicated alike in every copy,
    but for a loop body's argument, which reads the loop's result sharding."""
    return not any(not sid[slot] and reader.reads_loop_result(value)
                   for value, slot in zip(part[1], part[2]))


def _priced(reader: ModuleValues, ops: list[int] | None,
            kept: dict[int, int] | None = None) -> int:
    """The bytes of ``ops`` (program order; None: every op), as ``collective_bytes``
    prices them; ``kept`` gets those looked up by a key read from the store alone."""
    costs = reader.costs
    layout = _layout(reader)
    total = 0
    if costs is None:
        for op, entry in enumerate(layout):
            if entry is not None:
                total += (collective_bytes_at(reader, op) if entry is False or entry is _RETURN
                          else _rule_bytes(reader, op))
        return total
    known, key_of_part, sid = costs.bytes, reader.key_of_part, reader.store.sid
    for op in range(len(layout)) if ops is None else ops:
        entry = layout[op]
        if entry is None:
            continue
        if entry is False:
            total += collective_bytes_at(reader, op)
            continue
        if entry is True:
            total += _rule_bytes(reader, op)
            continue
        if entry is _RETURN:
            total += _return_bytes(reader, op)
            continue
        key = key_of_part(entry)
        cost = known.get(key)
        if cost is None:
            cost = _rule_bytes(reader, op)
            if all(need.target is None for need in _op_needs(reader, op)[0]):  # memoised
                known[key] = cost
        if kept is not None and key in known and _read_from_store(reader, entry, sid):
            kept[op] = cost
        total += cost
    return total


def _return_bytes(reader: ModuleValues, op: int) -> int:
    """``collective_bytes_at`` of a ``func.return`` of a ``func.func``, each value's
    reshard to its declared result sharding memoised in ``CostMemo.returns``."""
    graph, store = reader.graph, reader.store
    results = store.func_results[graph.op_parent[op]]
    types, sid, mesh = graph.value_type_key, store.sid, reader.mesh
    memo = reader.costs.returns
    total = 0
    for k, value in enumerate(graph.op_operands[op][:len(results)]):
        dst = store.value[results[k]]
        if dst is None and mesh is not None and graph.value_shape[value] is not None:
            dst = replicated(mesh, len(graph.value_shape[value]))
        if dst is not None and (value, tuple(d.axes for d in dst.dims), ()) in reader.resharded:
            src = reader.tensor(value)
            found = [] if src is None else reshard_tensor(
                src, dst, reader.mesh_of(src.sharding, dst))
            if not _returned_reuses(reader, op, value, dst, found):
                total += sum(c.bytes_per_device for c in found)
            continue
        key = (types[value], reader.sharding_id(value), sid[results[k]], mesh)
        cost = memo.get(key)
        if cost is None:
            cost = 0
            src = reader.tensor(value)
            if src is not None:
                dst = store.value[results[k]]
                if dst is None and mesh is not None:
                    dst = replicated(mesh, len(src.shape))
                if dst is not None:  # else an unsharded result is unknown: no reshard
                    cost = sum(c.bytes_per_device for c in reshard_tensor(
                        src, dst, reader.mesh_of(src.sharding, dst)))
            memo[key] = cost
        total += cost
    return total


_RETURN = "return"  # ``_bytes_layout``'s entry for a ``func.return`` of a ``func.func``


def _bytes_layout(reader: ModuleValues) -> list[tuple | bool | str | None]:
    """How ``collective_bytes`` prices each op: None, not at all (priced by its rule,
    no result); False, by ``collective_bytes_at``; True, by ``_rule_bytes`` (in program
    order in every copy: ``_PRICED_IN_ORDER``, or without ``costs``); the part of its
    key (``ModuleValues.op_key_part``, or ``_constant_part``, ``_own_part`` for an op
    without one), by its key (memoised ``_kept_needs``); ``_RETURN``, by
    ``_return_bytes`` (with ``costs``)."""
    graph = reader.graph
    layout: list[tuple | bool | str | None] = []
    folds = reader.facts.setdefault("folded branches", {})
    for op, name in enumerate(graph.op_name):
        if untaken(graph, op, folds):
            layout.append(None)  # in a branch XLA folds away
        elif (name == "func.return" and reader.costs is not None
                and graph.op_name[graph.op_parent[op]] == "func.func"):
            layout.append(_RETURN)
        elif not _by_rule(graph, op):
            layout.append(False)
        elif not graph.op_results[op]:
            layout.append(None)
        elif reader.costs is None or name in _PRICED_IN_ORDER or _rotates(reader, op):
            layout.append(True)
        else:
            part = None if name in _UNMEMOISED else reader.op_key_part(op)
            if part is None or part[0] is None:
                part = (_constant_part(reader, op) if name in _CONSTANTS else None) or (
                    _own_part(reader, op))
            layout.append(part)
    return layout


# Ops whose price reads or notes more than their own operands' and results' shardings,
# priced in program order in every copy: a window's gathers and an indexed op's computed
# results are noted for later ops (``ModuleValues.resharded``), a custom call's callback
# may answer anything; so does a rotation (``_rotates``), which reads the value its
# slices slice.
_PRICED_IN_ORDER = frozenset({"stablehlo.reduce_window", "stablehlo.custom_call",
                              *INDEXED_ROLES})


def _rotates(reader: ModuleValues, op: int) -> bool:
    """Whether op ``op`` is a concatenate XLA rewrites into a rotation (``halos.rotation``):
    the module's alone, kept in ``reader.facts``."""
    if reader.graph.op_name[op] != "stablehlo.concatenate":
        return False
    rotations = reader.facts.setdefault("rotations", {})
    found = rotations.get(op)
    if found is None:
        found = rotations[op] = rotation(reader.graph.ops[op]) is not None
    return found


def _own_part(reader: ModuleValues, op: int) -> tuple:
    """The part of a key (``ModuleValues.op_key_part``'s form) of an op without one
    (no rule, or one its attributes decide more than: ``_UNMEMOISED``) whose needs its
    own operands' and results' shardings decide, besides the module (``_read_needs``):
    the op itself, in the readers of these facts (one graph), then its values and
    their store slots."""
    token = reader.facts.get("own keys")
    if token is None:
        token = reader.facts["own keys"] = object()  # these facts' own, kept by the keys
    graph, ops = reader.graph, reader.costs.ops
    values = (*graph.op_operands[op], *graph.op_results[op])
    return (ops.setdefault((token, op), len(ops)), values,
            tuple([reader.store.read_slot[v] for v in values]))


def _constant_part(reader: ModuleValues, op: int) -> tuple | None:
    """A constant's part of a key as ``ModuleValues.op_key_part`` makes them (``key_of_part``
    completes it): its name and result type, then its result and store slot. A constant
    carries no rule, so it has no ``op_key``; its needs are those of its result's type
    and sharding alone (``_constant_key``), and reshard no operand, so its bytes are
    looked up by that key, and a copy whose slot holds the same sharding prices it
    alike (``BytesByOp``), instead of pricing every constant of every copy again."""
    graph = reader.graph
    if graph.op_operands[op] or len(graph.op_results[op]) != 1:
        return None
    value = graph.op_results[op][0]
    ops = reader.costs.ops
    # No rule: None where an op with one has its rule's hash, so the two never meet.
    head = ops.setdefault((graph.op_name[op], None, (), (graph.value_type_key[value],)),
                          len(ops))
    return (head, (value,), (reader.store.read_slot[value],))


def _rule_bytes(reader: ModuleValues, op: int) -> int:
    windows, kept = _kept_needs(reader, op)
    total = 0
    for collectives in windows:
        for c in collectives:
            total += c.bytes_per_device
    for need in kept:
        total += need.collective.bytes_per_device
    return total


def _by_rule(graph, op: int) -> bool:
    """Whether ``_found_at`` prices op ``op`` by its rule (``_implicit_found``): not an
    explicit reshard, a function return, a loop's carries, a manual computation, a
    call or a written collective."""
    name = graph.op_name[op]
    if name in _NOT_BY_RULE:
        return False
    if name in _EXPLICIT:
        return not graph.op_operands[op]
    if name == "func.return":
        return graph.op_name[graph.op_parent[op]] != "func.func"
    if name == "stablehlo.return":
        return not _returns_carries(graph, op) and not _returns_branch(graph, op)
    if name == MANUAL_RETURN:
        return graph.op_name[graph.op_parent[op]] != MANUAL_OP
    return True


def _found_at(reader: ModuleValues, op: int) -> Iterator[_Found]:
    graph, store = reader.graph, reader.store
    if _by_rule(graph, op):
        yield from _implicit_found(reader, op)
        return
    name, ir_op = graph.op_name[op], graph.ops[op]
    operands = graph.op_operands[op]
    if name in _EXPLICIT:
        src = reader.tensor(operands[0])
        dst = reader.sharding(graph.op_results[op][0])
        if src is not None:
            found = reshard_tensor(src, dst, reader.mesh_of(src.sharding, dst))
            yield from _found(ir_op, f"{_EXPLICIT[name]} to {dims_text(dst)}", found,
                              ("operand", 0), implicit=False)
    elif name == "func.return" and graph.op_name[graph.op_parent[op]] == "func.func":
        results = store.func_results[graph.op_parent[op]]
        for k, value in enumerate(operands):
            src = reader.tensor(value)
            if src is not None and k < len(results):
                dst = store.value[results[k]]
                if dst is None:
                    if reader.mesh is None:
                        continue  # an unsharded result is unknown: no reshard to predict
                    dst = replicated(reader.mesh, len(src.shape))
                found = reshard_tensor(src, dst, reader.mesh_of(src.sharding, dst))
                if found and not _returned_reuses(reader, op, value, dst, found):
                    reason = (f"returned {dims_text(src.sharding)} as result {k}, "
                              f"declared {dims_text(dst)}")
                    yield from _found(ir_op, reason, found, ("result", k))
    elif name == "stablehlo.while":
        yield from _carry_found(reader, op, operands, "enters the loop")
    elif name == "stablehlo.return" and _returns_carries(graph, op):
        yield from _carry_found(reader, graph.op_parent[op], operands,
                                  "returned by the loop body", at=ir_op)
    elif name == "stablehlo.return":  # ends a branch of a case / if
        yield from _branch_found(reader, op)
    elif name == MANUAL_OP:
        ins = store.manual[op][1]
        for k, value in enumerate(operands):
            src = reader.tensor(value)
            if src is not None and k < len(ins):
                found = reshard_tensor(src, ins[k], reader.mesh_of(src.sharding, ins[k]))
                yield from _found(ir_op, f"in-sharding {dims_text(ins[k])}", found,
                                  ("operand", k), implicit=False)
    elif name == MANUAL_RETURN:
        # The body's results leave in the out-shardings (on the free axes): XLA
        # reshards each returned value to them.
        owner = graph.op_parent[op]
        manual, _, outs = store.manual[owner]
        for k, value in enumerate(operands):
            src = reader.tensor(value)
            if src is not None and k < len(outs):
                dst = erase_manual_axes(outs[k], manual)
                found = reshard_tensor(src, dst, reader.mesh_of(src.sharding, dst))
                yield from _found(ir_op, f"returned {dims_text(src.sharding)} as out-sharding "
                                  f"{dims_text(dst)}", found, ("operand", k), implicit=False)
    elif name == "func.call":
        yield from _call_found(reader, op)
    elif op not in _written_twins(reader):  # a collective written in a manual computation
        kind, result_side = STABLEHLO_COLLECTIVES[name]
        values = graph.op_results[op] if result_side else operands
        total = 0
        for value in values:
            tensor = reader.tensor(value)
            if tensor is not None:
                total += shard_bytes(tensor.shape, collective_element_bytes(
                    tensor.element_bytes, tensor.dtype), dim_axes(tensor.sharding,
                                                                 len(tensor.shape)))
        yield from _found(ir_op, "explicit collective", [Collective(kind, (), total)], (),
                          implicit=False)


def _written_twins(reader: ModuleValues) -> dict[int, int]:
    """Written collectives XLA's common-subexpression elimination folds into an earlier
    one of the same block: the same operands, attributes (channels aside) and reduction.
    Each maps to the collective it repeats."""
    twins = reader.facts.get("written twins")
    if twins is None:
        graph, first = reader.graph, {}
        twins = reader.facts["written twins"] = {}
        for op, name in enumerate(graph.op_name):
            if name in STABLEHLO_COLLECTIVES:
                key = (name, graph.op_parent[op], tuple(graph.op_operands[op]),
                       _collective_key(graph.ops[op]))
                twins_of = first.setdefault(key, op)
                if twins_of != op:
                    twins[op] = twins_of
    return twins


def _collective_key(ir_op: ir.Operation) -> tuple:
    attributes = tuple(sorted((name, str(ir_op.attributes[name])) for name in ir_op.attributes
                              if name != "channel_handle"))
    regions = tuple(tuple(o.name for block in region.blocks for o in block.operations)
                    for region in ir_op.regions)
    return attributes, regions


def _returns_carries(graph, op: int) -> bool:
    """Whether ``op`` (a ``stablehlo.return``) ends a while loop's body (not its
    condition, whose block comes first)."""
    owner = graph.op_parent[op]
    if owner < 0 or graph.op_name[owner] != "stablehlo.while":
        return False
    blocks = graph.op_blocks[owner]
    return len(blocks) == 2 and bool(blocks[1][1]) and blocks[1][1][-1] == op


_BRANCHING = frozenset({"stablehlo.case", "stablehlo.if"})


def _returns_branch(graph, op: int) -> bool:
    """Whether ``op`` (a ``stablehlo.return``) ends a branch of a case / if."""
    owner = graph.op_parent[op]
    return owner >= 0 and graph.op_name[owner] in _BRANCHING


def _branch_found(reader: ModuleValues, op: int) -> Iterator[_Found]:
    """Values a branch returns sharded otherwise than the case / if returns them: XLA
    partitions each branch to the conditional's sharding (``HandleConditional``), so
    it reshards the branch's results there (a host callback's result, on one device,
    is broadcast by an all-reduce)."""
    graph = reader.graph
    owner = graph.op_parent[op]
    folds = reader.facts.setdefault("folded branches", {})
    for k, (value, result) in enumerate(zip(graph.op_operands[op], graph.op_results[owner])):
        # a folded case's result is what its taken branch returned
        src = reader.tensor(folded_value(graph, value, folds))
        dst = reader.sharding(result)
        if src is None or dst is None or src.sharding is None:
            continue
        found = _resharded(reader, src, dst)
        if found:
            reason = (f"branch result {k} {dims_text(src.sharding)}, the "
                      f"{graph.op_name[owner].removeprefix('stablehlo.')} returns {dims_text(dst)}")
            yield from _found(graph.ops[op], reason, found, ("operand", k))


def _resharded(reader: ModuleValues, src: Tensor, dst: TensorSharding) -> list[Collective]:
    """``reshard_tensor``, where a scalar on one device (its mesh maximal: a scalar's
    sharding alone does not tell) is broadcast as any value on one device is."""
    mesh = reader.meshes.get(src.sharding.mesh)
    if mesh is None or not mesh.maximal:
        return reshard_tensor(src, dst, reader.mesh_of(src.sharding, dst))
    if not src.shape and dst.mesh != src.sharding.mesh:
        names = tuple(name for name, _ in mesh_axes(reader.mesh_of(dst), None, dst))
        return [Collective(ALL_REDUCE, names, collective_element_bytes(
            src.element_bytes, src.dtype))]
    return reshard_tensor(src, dst, reader.mesh_of(dst))  # the broadcast's axes: dst's mesh


def _carry_found(reader: ModuleValues, loop: int, values: list[int], how: str,
                   at: ir.Operation | None = None) -> Iterator[_Found]:
    """Loop carries sharded otherwise than the loop carries them (its per-value
    sharding): the initial values before the loop, the body's results at its end.
    XLA reshards each one there (inside the body: once per iteration)."""
    graph = reader.graph
    ir_op = at if at is not None else graph.ops[loop]
    for k, (value, result) in enumerate(zip(values, graph.op_results[loop])):
        src, dst = reader.tensor(value), reader.sharding(result)
        if src is None or dst is None or src.sharding is None:
            continue
        found = reshard_tensor(src, dst, reader.mesh_of(src.sharding, dst))
        if found:
            reason = (f"carry {k} {how} {dims_text(src.sharding)}, "
                      f"the loop carries {dims_text(dst)}")
            yield from _found(ir_op, reason, found, ("operand", k))


def _call_found(reader: ModuleValues, op: int) -> Iterator[_Found]:
    """Operands passed to a callee whose arguments are explicitly sharded differently."""
    graph, ir_op = reader.graph, reader.graph.ops[op]
    callee = ir.FlatSymbolRefAttr(ir_op.attributes["callee"]).value
    func = reader.funcs.get(callee)
    if func is None or not graph.op_blocks[func]:
        return
    args = graph.op_blocks[func][0][0]
    for k, (value, arg) in enumerate(zip(graph.op_operands[op], args)):
        src = reader.tensor(value)
        dst = reader.store.get(arg)  # an unsharded callee argument follows its caller
        if src is not None and dst is not None:
            found = reshard_tensor(src, dst, reader.mesh_of(src.sharding, dst))
            yield from _found(ir_op, f"@{callee} takes it {dims_text(dst)}", found,
                              ("operand", k))


def _implicit_found(reader: ModuleValues, op: int) -> Iterator[_Found]:
    windows, kept = _kept_needs(reader, op)
    ir_op = reader.graph.ops[op]
    for collectives in windows:
        yield from _found(ir_op, "sharded window dimension", collectives, ("operand", 0))
    for need in kept:
        tensor = ("type",) if need.operand is None else ("operand", need.operand)
        yield from _found(ir_op, need.reason, [need.collective], tensor)


def _kept_needs(reader: ModuleValues, op: int) -> tuple[tuple, list]:
    """What op ``op``'s rule needs (``_needs``): a ``reduce_window``'s window
    collectives, and the needs XLA does not answer with a value it already
    resharded for an earlier op (then noted for later ops in ``reader.resharded``)."""
    graph = reader.graph
    if not graph.op_results[op]:
        return (), []
    needs = _op_needs(reader, op)
    _note_computed(reader, op)
    windows = needs[1:]
    if windows and windows[0]:
        windows = _kept_windows(reader, op, windows[0])
    if not needs[0]:  # most ops
        return windows, ()
    kept = []
    resharded = []
    for need in needs[0]:
        if need.target is not None and not _copied_operand(reader, op, need.operand):
            value = graph.op_operands[op][need.operand]
            if not need.groups and _reshaped_from(reader, op, value) == need.target:
                continue  # the reshape's handler made it from that value: XLA reuses it
            keys = _reshard_keys(_imported_value(reader, value), need)
            if any(reuses_reshard(reader, reader.resharded, key, op, need.collective.kind)
                   for key in keys):
                continue  # XLA reuses the value it already resharded for an earlier op
                # (inside the same device groups: each grouping has its own cache)
            resharded.extend(keys)
        kept.append(need)
    for reshard in resharded:  # for later ops only: two needs here both count
        note_reshard(reader, reader.resharded, reshard, op)
    return windows, kept


def _copied_operand(reader: ModuleValues, op: int, operand: int | None) -> bool:
    """Whether XLA reshards operand ``operand`` of op ``op`` as an instruction of its
    own: the partitioner copies a dot's right-hand side that is its left-hand side
    too (``x . x^T``), so that copy's reshard neither reuses an earlier reshard of
    the value nor is reused by a later one (each instruction has its own reshard
    cache); the left-hand side keeps the value's."""
    operands = reader.graph.op_operands[op]
    return (operand == 1 and reader.graph.op_name[op] in DOTS and len(operands) > 1
            and _imported_value(reader, operands[0]) == _imported_value(reader, operands[1]))


def _imported_value(reader: ModuleValues, value: int) -> int:
    """The value XLA partitions for ``value``: importing the module folds a
    ``select(p, a, a)`` to ``a`` (StableHLO's folder; XLA's module before its
    optimizations holds no such select), so its readers reshard ``a`` itself and
    share ``a``'s reshard cache. Only where the select keeps ``a``'s sharding: one
    sharded otherwise would have XLA reshard ``a`` from its own, another question."""
    graph = reader.graph
    while True:
        owner = graph.value_def[value]
        if owner < 0 or graph.op_name[owner] != _SELECT:
            return value
        _, on_true, on_false = graph.op_operands[owner]
        if on_true != on_false or reader.sharding(on_true) != reader.sharding(value):
            return value
        value = on_true


def _reshaped_from(reader: ModuleValues, op: int, value: int) -> tuple | None:
    """The sharding (axes per dimension) XLA's reshape handler computes ``value`` in,
    where a reshape in op ``op``'s block makes it in another sharding than its own and
    slices that (``op_comm.reshaped_as_operand``: a replicated scalar reshaped to a
    dimension of one sharded over 8 devices); None otherwise. The reshard cache keeps
    the computed value for the sliced one (``PartitionedHlo::Reshard`` caches the
    reverse), so resharding the value back moves nothing."""
    graph = reader.graph
    owner = graph.value_def[value]
    if (owner < 0 or graph.op_name[owner] != RESHAPE or not active_rules().reuses_reshards
            or block_of(graph, owner) != block_of(graph, op)):
        return None
    ruled = reader.rule_tensors(owner)
    if ruled is None:
        return None
    rule, operands, results = ruled
    computed = reshaped_as_operand(rule, operands[0], results)[0].sharding
    if computed is None or computed == results[0].sharding:
        return None
    return tuple(d.axes for d in computed.dims)


def _kept_windows(reader: ModuleValues, op: int, collectives: list[Collective]) -> tuple:
    """A reduce_window's window collectives, less the gather of its operand where an
    earlier op gathered that value the same way (XLA reuses it: two cumulative sums
    along one sharded axis of one value gather it once)."""
    value = reader.graph.op_operands[op][0]
    operand = reader.tensor(value)
    target = None if operand is None else window_gather_target(reader.graph.ops[op], operand)
    if target is None:
        return (collectives,)
    key = (value, target, ())
    if reuses_reshard(reader, reader.resharded, key, op, ALL_GATHER):
        return ([c for c in collectives if c.kind != ALL_GATHER],)
    note_reshard(reader, reader.resharded, key, op)
    return (collectives,)


def _note_computed(reader: ModuleValues, op: int) -> None:
    """Results op ``op``'s handler computes in another sharding than their own and then
    reshards: XLA's reshard cache keeps the computed value for the resharded one
    (``PartitionedHlo::Reshard`` caches the reverse), so a later reshard of the
    result back to the computed sharding (a return, another op) reuses it."""
    for value, computed in _computed_results(reader, op):
        own = reader.sharding(value)
        target = tuple(d.axes for d in computed.dims)
        if own is None or tuple(d.axes for d in own.dims) != target:
            note_reshard(reader, reader.resharded, (value, target, ()), op)


def _computed_results(reader: ModuleValues, op: int) -> list[tuple[int, TensorSharding]]:
    """(result, sharding computed in) of a gather / scatter (XLA's indexed-op handler)
    or a custom_partitioning op (its partition rule); none for other ops."""
    graph = reader.graph
    name, ir_op = graph.op_name[op], graph.ops[op]
    if name not in INDEXED_ROLES and not (name == "stablehlo.custom_call"
                                          and is_custom_partitioned(ir_op)):
        return []
    if name in INDEXED_ROLES:
        # As its needs (``_read_needs``): its own values' shardings decide.
        return _by_own_shardings(reader, op, "computed results",
                                 lambda: _indexed_computed(reader, op, ir_op))
    ruled = reader.rule_tensors(op)
    if ruled is None:
        return []
    rule, operands, results = ruled
    mesh = reader.mesh_of(*(t.sharding for t in results + operands))
    computed = mesh and custom_partitioned_results(
        ir_op, operands, results, mesh, reader.facts.setdefault("custom partitions", {}))
    return list(zip(graph.op_results[op], computed or []))


def _indexed_computed(reader: ModuleValues, op: int, ir_op: ir.Operation
                      ) -> list[tuple[int, TensorSharding]]:
    """``_computed_results`` of a gather / scatter: its result, in the sharding XLA's
    indexed-op handler computes it in (none where the handler does not say)."""
    ruled = reader.rule_tensors(op)
    roles = None if ruled is None else indexed_roles_for(ir_op)
    if roles is None:
        return []
    rule, operands, results = ruled
    mesh = reader.mesh_of(*(t.sharding for t in results + operands))
    computed = indexed_computed(rule, roles, operands, results, mesh)
    return [] if computed is None else [(reader.graph.op_results[op][0], computed)]


def _returned_reuses(reader: ModuleValues, op: int, value: int, dst: TensorSharding,
                     found: list[Collective]) -> bool:
    """Whether returning ``value`` as ``dst`` reuses a reshard of it an earlier op made
    (or the value its handler computed it from, ``_note_computed``): the results of a
    function returning several (a tuple, whose handler reshards each element) go
    through the same reshard cache; a single result, the root itself, does not."""
    if len(reader.graph.op_operands[op]) < 2:
        return False
    key = (value, tuple(d.axes for d in dst.dims), ())
    return key in reader.resharded and all(
        reuses_reshard(reader, reader.resharded, key, op, c.kind) for c in found)


def _reshard_keys(value: int, need: OpCommunication) -> list[tuple]:
    """What XLA keys a reshard of ``value`` for ``need`` by: its target and the device
    groups it is made in (each grouping has its own reshard cache), except for an
    all-gather under the platform's all-gather CSE, which merges equal gathers
    whichever cache made them; then the value it caches on the way
    (``OpCommunication.reuse``), where there is one."""
    groups = need.groups
    if (need.collective.kind == ALL_GATHER
            and active_rules().all_gather_cse_distance is not None):
        groups = ()
    keys = [(value, need.target, groups)]
    if need.reuse is not None:
        keys.append((value, need.reuse, groups))
    return keys


def reuses_reshard(reader: ModuleValues, first: dict, reshard: tuple, op: int,
                   kind: str) -> bool:
    """Whether op ``op`` reuses the value an earlier op resharded as ``reshard`` (a
    value, its target and its device groups: ``_reshard_keys``; ``first``: ``note_reshard``'s record of the first ones)
    by a collective of ``kind``, on the platform predicted for:
    ``PlatformRules.reuses_reshards``, and for an all-gather under
    ``all_gather_cse_distance``, where the first gather's readers are close. A
    collective-permute is reused everywhere (XLA's partitioner caches the reshard,
    and XLA:TPU, which gathers again, keeps it: one permute of the tokens per step
    serves the embedding lookup and its gradient's scatter on every split compiled).
    Never from another block: XLA makes each branch and loop body a computation of
    its own, where a value captured from outside is another instruction (the
    computation's parameter), with a reshard cache of its own."""
    if reshard not in first or first[reshard][0] != block_of(reader.graph, op):
        return False
    if kind == COLLECTIVE_PERMUTE:
        return True
    rules = active_rules()
    if kind == ALL_GATHER and rules.all_gather_cse_distance is not None:
        if rules.windows_loop_all_gathers and _windowed(
                reader, op, reshard[0], _gathered_axes(reader, reshard[0], reshard[1])):
            return False  # its own windowed loop, made by the partitioner before any CSE
        return gather_reused(first, reshard, *_height(reader, op),
                             rules.all_gather_cse_distance)
    return rules.reuses_reshards


def note_reshard(reader: ModuleValues, first: dict, reshard: tuple, op: int) -> None:
    """Record op ``op``'s reshard in ``first`` where it is the first of ``reshard``."""
    if reshard not in first:
        first[reshard] = (_height(reader, op)
                          if active_rules().all_gather_cse_distance is not None
                          else (block_of(reader.graph, op), None))


def _height(reader: ModuleValues, op: int) -> tuple[tuple[int, int], int]:
    """``(block, height)`` of op ``op`` in XLA's partitioned module (``cost.heights``):
    an op whose partial sums are all-reduced has the all-reduce after it."""
    graph = reader.graph
    block = block_of(graph, op)
    heights = reader.heights.get(block)
    if heights is None:
        owner, index = block
        ops = graph.op_blocks[owner][index][1] if owner >= 0 else ()
        after = {}
        for member in ops:
            if not graph.op_results[member]:
                continue
            reduced = sum(1 for need in _op_needs(reader, member)[0] if need.operand is None
                          and need.collective.kind == ALL_REDUCE)
            if reduced:
                after[member] = reduced
        heights = reader.heights[block] = block_heights(graph, block, after)
    return block, heights.get(op, 0)


def _op_needs(reader: ModuleValues, op: int) -> tuple:
    """``_needs`` of op ``op`` (which has results), memoised by its key."""
    name = reader.graph.op_name[op]
    if name in _UNMEMOISED:
        # Ops whose attributes decide more than their rule does: memoised by op instead.
        memoised = name in _READ_MEMOISED or (name == "stablehlo.concatenate"
                                              and not _rotates(reader, op))
        return _read_needs(reader, op) if memoised else _needs(
            reader, op, reader.graph.ops[op])
    key = reader.op_key(op)
    if key is None and name in _CONSTANTS and reader.costs is not None:
        key = _constant_key(reader, op)
    if key is None:  # no rule (nor ``costs``): its own values decide, as an op's of
        return _read_needs(reader, op)  # ``_READ_MEMOISED``
    needs = reader.costs.found.get(key)
    if needs is None:
        needs = reader.costs.found[key] = _needs(reader, op, reader.graph.ops[op])
    return needs


def _read_needs(reader: ModuleValues, op: int) -> tuple:
    """``_needs`` of an op of ``_READ_MEMOISED`` (or without an ``op_key``: no rule,
    a constant read without ``costs``), memoised by op in ``reader.facts``:
    the readers sharing them read one module (the same op, attributes and producers),
    so the shardings of the op's operands and results (interned: ``sharding_id``)
    and the platform decide the answer. Unmemoised without ``reader.costs``."""
    return _by_own_shardings(reader, op, "op needs",
                             lambda: _needs(reader, op, reader.graph.ops[op]))


def _by_own_shardings(reader: ModuleValues, op: int, fact: str, compute):
    """``compute()``, memoised in ``reader.facts[fact]`` by op, mesh, platform rules and
    the shardings of the op's operands and results (interned: ``sharding_id``): the
    readers sharing these facts read one module, which ask for every copy of it.
    Unmemoised without ``reader.costs``."""
    if reader.costs is None:
        return compute()
    memo = reader.facts.setdefault(fact, {})
    graph, sharding_id = reader.graph, reader.sharding_id
    key = (op, reader.mesh, active_rules(),
           *[sharding_id(v) for v in graph.op_operands[op]],
           *[sharding_id(v) for v in graph.op_results[op]])
    found = memo.get(key)
    if found is None:
        found = memo[key] = compute()
    return found


# (A custom call's key misses its target and backend config: a custom_partitioning
# op's callback is one of them; a sort's, which of its results are read.)
_UNMEMOISED = frozenset({"stablehlo.reduce_window", "stablehlo.custom_call", "stablehlo.sort",
                         *HALO_OPS, *INDEXED_ROLES})
# Of those, the ops whose needs only their own operands and results decide, besides the
# module: not a custom call (a custom_partitioning callback may answer anything) nor a
# concatenate (a rotation reads the value its slices slice, ``_rotation_needs``; one that
# ``_rotates`` not is memoised as these are).
_READ_MEMOISED = _UNMEMOISED - {"stablehlo.custom_call", "stablehlo.concatenate"}
# Ops without operands whose needs only their result's type and sharding decide; they
# carry no attached rule (no ``op_key``), and a program has thousands of them.
_CONSTANTS = frozenset({"stablehlo.constant", "sdy.constant"})


def _constant_key(reader: ModuleValues, op: int) -> tuple | None:
    """``_op_needs``'s key of a constant: the key of its ``_constant_part`` (its name,
    result type and sharding, interned: the same in every reader of one ``CostMemo``,
    as ``op_key``'s)."""
    part = _constant_part(reader, op)
    return None if part is None else reader.key_of_part(part)


# Custom calls XLA partitions with a partitioner of their own (custom_partitioning's).
_SELF_PARTITIONED_TARGETS = frozenset({"CustomSPMDPartitioning"})


def partitioned_as(name: str, ir_op: ir.Operation, operands: list[Tensor],
                   mesh: MeshInfo | None) -> str:
    """The op name ``op_communication`` partitions ``ir_op`` as: a custom call with a
    partitioner of its own is not partitioned as the calls XLA has none for, a
    convolution with feature groups whose kernel holds more than one input feature
    per device is not partitioned at all (``UNPARTITIONED_CONVOLUTION``), one with
    batch groups split over part of the devices on the kernel only computes them
    whole (``GATHERED_BATCH_GROUPS``)."""
    if name == "stablehlo.custom_call":
        target = ir.StringAttr(ir_op.attributes["call_target_name"]).value
        if target in _SELF_PARTITIONED_TARGETS:
            return f"{name} @{target}"
    if name != CONVOLUTION or len(operands) != 2 or any(t.sharding is None for t in operands):
        return name
    lhs, kernel = operands
    dims = stablehlo.ConvDimensionNumbers(ir_op.attributes["dimension_numbers"])
    if ir.IntegerAttr(ir_op.attributes["feature_group_count"]).value > 1:
        dim = dims.kernel_input_feature_dimension
        count = size_product(dim_axes(kernel.sharding, len(kernel.shape))[dim])
        if -(-kernel.shape[dim] // count) > 1:
            return UNPARTITIONED_CONVOLUTION
    if ir.IntegerAttr(ir_op.attributes["batch_group_count"]).value > 1 and mesh is not None:
        lhs_axes = dim_axes(lhs.sharding, len(lhs.shape))
        kernel_axes = dim_axes(kernel.sharding, len(kernel.shape))
        split = size_product(kernel_axes[dims.kernel_output_feature_dimension])
        windows = [lhs_axes[d] for d in dims.input_spatial_dimensions] + [
            kernel_axes[d] for d in dims.kernel_spatial_dimensions]
        # The kernel is resharded to the input's sharding only where it is not the
        # larger of the two, and without halos where no window is sharded (other
        # cases are partitioned otherwise: not modelled).
        if (not lhs_axes[dims.input_batch_dimension] and not any(windows)
                and 1 < split < prod(mesh.sizes.values())
                and prod(lhs.shape) >= prod(kernel.shape)):
            return GATHERED_BATCH_GROUPS
    return name


def _needs(reader: ModuleValues, op: int, ir_op: ir.Operation) -> tuple:
    """``(needs, *window)``: what op ``op``'s rule needs (``op_communication``, or
    XLA's gather/scatter handler) and, for a ``reduce_window``, its sharded
    window's collectives; ``((),)`` when the op has no rule or a non-static tensor."""
    single = _single_device_needs(reader, op)
    if single is not None:
        return (single,)
    broadcasts = _broadcast_needs(reader, op)
    if rotated_slice(ir_op):  # dead once XLA rewrote its readers into a rotation
        return (broadcasts,)
    rotated = rotation(ir_op)
    if rotated is not None:
        return (broadcasts + _rotation_needs(reader, op, rotated),)
    ruled = reader.rule_tensors(op)
    if ruled is None:
        return (broadcasts,)
    rule, operands, results = ruled
    if is_custom_partitioned(ir_op):  # partitioned by its own callback, not by its rule
        mesh = reader.mesh_of(*(t.sharding for t in results + operands))
        needs = mesh and custom_partitioned_needs(ir_op, operands, results, mesh,
                                                  reader.facts.setdefault("custom partitions", {}))
        if needs is not None:
            return (broadcasts + needs,)
    if moves_tiles(ir_op.name):  # a concatenate / sort along a sharded dimension
        needs = moved_tiles_needs(ir_op, operands, results,
                                  reader.mesh_of(*(t.sharding for t in results + operands)))
        if needs is not None:
            return (broadcasts + needs,)
    window = ()
    if reader.graph.op_name[op] == "stablehlo.reduce_window":
        window = (list(window_collectives(ir_op, operands[0])),)
    mesh = reader.mesh_of(*(t.sharding for t in results + operands))
    results, moved = explicit_result_reshard(reader, op, results)
    roles = indexed_roles_for(ir_op)
    needs = None
    if roles is not None:  # XLA's gather/scatter handler, not the factor model
        needs = indexed_communication(rule, roles, operands, results, mesh)
    if needs is None:
        graph = reader.graph
        unused = frozenset(i for i, value in enumerate(graph.op_results[op]) if not graph.uses[value])
        needs = op_communication(rule, operands, results, mesh,
                                 op_name=partitioned_as(graph.op_name[op], ir_op, operands, mesh),
                                 unused=unused)
    if ir_op.name == CONVOLUTION:
        needs = split_conv_all_reduces(tuple(needs), conv_collectives(
            ir_op, operands[0], operands[1], results[0])[1])
    needs = tuple(needs) + moved
    return (broadcasts + needs + halo_needs(ir_op, operands, results, needs), *window)


def explicit_result_reshard(reader: ModuleValues, op: int, results: list[Tensor]
                             ) -> tuple[list[Tensor], tuple[OpCommunication, ...]]:
    """A dot whose result Shardy's explicit-reshards step computes as its operands
    imply (``plan_dot``, run inside XLA before partitioning): the results the op
    computes, and the reshard of its result to the propagated sharding after it."""
    if reader.graph.op_name[op] not in DOTS:
        return results, ()
    for edit in plan_dot(reader, op):
        if sliced_further(edit.computed.dims, edit.wanted.dims):
            return results, ()
        computed = replace(results[0], sharding=edit.computed)
        reason = (f"computed {dims_text(edit.computed)} as its operands imply "
                  f"(an explicit reshard), then resharded to {dims_text(edit.wanted)}")
        source = tuple(d.axes for d in edit.computed.dims)
        return [computed, *results[1:]], tuple(
            OpCommunication(None, reason, collective, source=source)
            for collective in _resharded(reader, computed, edit.wanted))
    return results, ()


def _rotation_needs(reader: ModuleValues, op: int, rotated: tuple) -> tuple[OpCommunication, ...]:
    """A concatenate XLA rewrites into a rotation (``halos.rotation``): its source
    value resharded to the result's sharding, then rotated."""
    graph = reader.graph
    source = graph.op_operands[graph.value_def[graph.op_operands[op][0]]][0]
    operand, result = reader.tensor(source), reader.tensor(graph.op_results[op][0])
    if operand is None or result is None or result.sharding is None:
        return ()
    needs = tuple(OpCommunication(0, f"rotated from {dims_text(operand.sharding)}, resharded "
                                  f"to {dims_text(result.sharding)}", collective)
                  for collective in _resharded(reader, operand, result.sharding))
    return needs + rotate_needs(result, *rotated[1:])


def _on_one_device(reader: ModuleValues, tensor: Tensor | None) -> bool:
    """Whether ``tensor`` lives on one device: its mesh is maximal (a host callback's
    result), which also tells a scalar's sharding apart."""
    if tensor is None or tensor.sharding is None:
        return False
    mesh = reader.meshes.get(tensor.sharding.mesh)
    return mesh is not None and mesh.maximal


def _broadcast_needs(reader: ModuleValues, op: int) -> tuple[OpCommunication, ...]:
    """The operands on one device (``_on_one_device``) of an op that runs on a mesh:
    XLA broadcasts each to every device before the op (``PartitionedHlo::Broadcast``:
    an all-reduce of the owner's value and the others' zeros), once per value."""
    graph = reader.graph
    results = [reader.tensor(v) for v in graph.op_results[op]]
    result = next((t for t in results if t is not None and t.sharding is not None), None)
    if result is None or _on_one_device(reader, result):
        return ()
    needs = []
    for index, value in enumerate(graph.op_operands[op]):
        operand = reader.tensor(value)
        if not _on_one_device(reader, operand):
            continue
        target = replicated(result.sharding.mesh, len(operand.shape))
        reason = "on one device, the op runs on the mesh: broadcast"
        needs.extend(OpCommunication(index, reason, collective, target=target.dims)
                     for collective in _resharded(reader, operand, target))
    return tuple(needs)


def _single_device_needs(reader: ModuleValues, op: int) -> tuple[OpCommunication, ...] | None:
    """The needs of an op that runs on one device (every result maximal, as a host
    callback's): XLA's ``HandleSingleDevice`` reshards each operand to that device,
    replicating a tiled one first (all-gathers, ``reshard_collectives``); None for
    any other op."""
    results = [reader.tensor(v) for v in reader.graph.op_results[op]]
    if not results or any(t is None or not maximal(t.sharding, len(t.shape)) or
                          not t.shape for t in results):
        return None
    target = results[0].sharding
    needs = []
    for index, value in enumerate(reader.graph.op_operands[op]):
        operand = reader.tensor(value)
        if operand is None or operand.sharding is None:
            continue
        reason = f"sharded {dims_text(operand.sharding)}, the op runs on one device"
        needs.extend(OpCommunication(index, reason, collective)
                     for collective in reshard_tensor(
                         operand, target, reader.mesh_of(operand.sharding)))
    return tuple(needs)


def comm_report(module: ir.Module | ir.Operation, *,
                missing_as_replicated: bool = True, platform: str = "cpu") -> CommReport:
    """Predict every collective of ``module`` from the shardings it holds, as XLA
    compiles it for ``platform`` ("cpu" or "tpu", ``platforms.PLATFORMS``).

    With ``missing_as_replicated`` (what XLA does once propagation is over) a
    value without a sharding counts as replicated on the module's first mesh;
    otherwise it is unknown and needs nothing.
    """
    with predicting_for(platform_rules(platform)):
        reader = ModuleValues(module.operation, missing_as_replicated=missing_as_replicated)
        return comm_report_of(reader)


def comm_report_of(reader: ModuleValues) -> CommReport:
    """``comm_report`` of a module already read (``reader`` is used up: its reshard
    cache fills), for the platform predicted for (``platforms.active_rules``)."""
    sites: list[tuple[int, CommEntry]] = []
    trips: dict[int, int | None] = {}  # while loop -> its static trip count
    folds = reader.facts.setdefault("folded branches", {})
    for op in range(len(reader.graph.ops)):
        if untaken(reader.graph, op, folds):
            continue  # in a branch XLA folds away: never compiled
        sites.extend((op, entry) for entry in
                     collectives_at(reader, op, runs_per_step(reader.graph, op, trips)))
    return CommReport(tuple(entry for _, entry in as_compiled(reader, sites)),
                      _notes(reader, trips))


def as_compiled(reader: ModuleValues, sites: list[tuple[int, CommEntry]]
                ) -> list[tuple[int, CommEntry]]:
    """``(op, entry)`` sites of every op's collectives, in program order, as the
    platform predicted for compiles them: loop all-gathers windowed, all-reduces
    reassociated and combined, as its rules say (what ``comm_report_of`` reports
    and what every step-time model of a program times)."""
    rules = active_rules()
    if rules.dot_operands_moved_as:
        sites = _move_dot_operands_narrow(reader, sites)
    if rules.windows_loop_all_gathers:
        sites = _window_loop_all_gathers(reader, sites)
    if rules.all_gathers_as_all_reduce_below or rules.all_gathers_vectors_as_all_reduce:
        sites = _all_gathers_as_all_reduces(reader, sites)
    if rules.hoists_accumulated_all_reduces:
        sites = _hoist_accumulated_all_reduces(reader, sites)
    if rules.reassociates_all_reduces:
        sites = _reassociate_all_reduces(reader, sites)
    if rules.all_reduce_combine_bytes:
        sites = _combine_all_reduces(reader, sites, rules.all_reduce_combine_bytes)
    return sites


def _move_dot_operands_narrow(reader: ModuleValues, sites: list[tuple[int, CommEntry]]
                              ) -> list[tuple[int, CommEntry]]:
    """Collectives of values only dots read, moved as the platform moves a dot's operands
    (``PlatformRules.dot_operands_moved_as``): XLA:TPU converts the dots' f32 operands
    to bf16 and moves the convert above the layout ops (a reshape, a transpose, a
    slice) between, above an all-gather at such an op and, where the platform says so
    (``all_reduces_dot_operands_narrow``), above the all-reduce of a dot's partial
    sums."""
    rules = active_rules()
    graph = reader.graph
    out = []
    for op, entry in sites:
        operand = _OPERAND.match(entry.tensor)
        value = None
        if (entry.kind == ALL_GATHER and operand is not None
                and graph.op_name[op] in _LAYOUT_OPS):
            value, moved_how = graph.op_operands[op][int(operand.group(1))], "gathered"
        elif (entry.kind == ALL_REDUCE and entry.implicit
              and rules.all_reduces_dot_operands_narrow
              and graph.op_name[op] == "stablehlo.dot_general"):
            value, moved_how = graph.op_results[op][0], "all-reduced"
        only_dots = value is not None and _only_dots_read(graph, op)
        tensor = reader.tensor(value) if only_dots else None
        moved = rules.dot_operands_moved_as.get(tensor.dtype) if tensor else None
        if moved is not None and moved[1] < tensor.element_bytes:
            entry = replace(entry, bytes_per_device=entry.bytes_per_device * moved[1]
                            // tensor.element_bytes,
                            reason=entry.reason + f", {moved_how} in {moved[0]} for the dots "
                            "reading it")
        out.append((op, entry))
    return out


# Ops that only lay their operand out anew, which XLA moves a dot operand's convert above.
_LAYOUT_OPS = frozenset({RESHAPE, "stablehlo.transpose", "stablehlo.slice"})


def _only_dots_read(graph, op: int) -> bool:
    """Whether every reader of ``op``'s results is a dot, directly or through layout ops
    (``_LAYOUT_OPS``), and some reader is."""
    seen, stack, dots = {op}, [op], 0
    while stack:
        for value in graph.op_results[stack.pop()]:
            for user, _ in graph.uses[value]:
                name = graph.op_name[user] if user >= 0 else None
                if name == "stablehlo.dot_general":
                    dots += 1
                elif name in _LAYOUT_OPS:
                    if user not in seen:
                        seen.add(user)
                        stack.append(user)
                else:
                    return False
    return dots > 0


def _window_loop_all_gathers(reader: ModuleValues, sites: list[tuple[int, CommEntry]]
                             ) -> list[tuple[int, CommEntry]]:
    """A dot's all-gathered operand inside a loop body as the platform gathers it: a
    windowed loop of collective-permutes (``platforms.windowed_bytes``)."""
    graph = reader.graph
    out = []
    for op, entry in sites:
        devices = _axis_devices(reader, entry.axes)
        operand = _OPERAND.match(entry.tensor)
        index = int(operand.group(1)) if operand is not None else -1
        if (entry.kind == ALL_GATHER and devices is not None and operand is not None
                and _windowed(reader, op, graph.op_operands[op][index], set(entry.axes))
                and active_rules().windows_over(devices, _gathers_contracted(
                    reader, op, index, set(entry.axes)))):
            entry = replace(entry, kind=COLLECTIVE_PERMUTE,
                            bytes_per_device=windowed_bytes(devices, entry.bytes_per_device),
                            reason=entry.reason + ", gathered in a loop body by a windowed "
                            "loop of collective-permutes")
        out.append((op, entry))
    return out


def _gathers_contracted(reader: ModuleValues, op: int, index: int, axes: set[str]) -> bool:
    """Whether dot ``op`` contracts a dimension of its operand ``index`` that is
    sharded over one of ``axes`` (the gather's)."""
    try:
        dims = stablehlo.DotDimensionNumbers(reader.graph.ops[op].attributes[
            "dot_dimension_numbers"])
    except (KeyError, ValueError, AttributeError):
        return False
    contracted = dims.lhs_contracting_dimensions if index == 0 \
        else dims.rhs_contracting_dimensions
    sharding = reader.sharding(reader.graph.op_operands[op][index])
    return sharding is not None and any(
        k in contracted and any(axis.name in axes for axis in dim.axes)
        for k, dim in enumerate(sharding.dims))


def _all_gathers_as_all_reduces(reader: ModuleValues, sites: list[tuple[int, CommEntry]]
                                ) -> list[tuple[int, CommEntry]]:
    """The all-gathers the platform runs as all-reduces of the gathered buffer
    (``PlatformRules.gathers_by_all_reduce``: small shards over very many devices,
    vectors), then combined with the other all-reduces."""
    rules = active_rules()
    out = []
    for op, entry in sites:
        devices = _axis_devices(reader, entry.axes)
        gathered = _gathered(reader, op, entry) if entry.kind == ALL_GATHER else None
        if (entry.kind == ALL_GATHER and devices is not None and gathered is not None
                and rules.gathers_by_all_reduce(devices, entry.bytes_per_device,
                                                len(gathered.shape), gathered.element_bytes)):
            entry = replace(entry, kind=ALL_REDUCE,
                            reason=entry.reason + ", gathered by an all-reduce of its shard "
                            "written into zeros")
        out.append((op, entry))
    return out


def _gathered(reader: ModuleValues, op: int, entry: CommEntry) -> Tensor | None:
    """The value ``entry`` reshards at op ``op``: its operand (a returned value: the
    return's), else its result (a reduce's partial results keep the reduced
    dimensions: its first operand, ``op_comm.VARIADIC_REDUCE``)."""
    graph = reader.graph
    operand = _OPERAND.match(entry.tensor) or (
        _RETURNED.match(entry.tensor) if graph.op_name[op] == "func.return" else None)
    values = ([graph.op_operands[op][int(operand.group(1))]] if operand is not None
              else graph.op_operands[op][:1] if graph.op_name[op] == VARIADIC_REDUCE
              else graph.op_results[op][:1])
    return reader.tensor(values[0]) if values else None


def _windowed(reader: ModuleValues, op: int, value: int, axes: set[str]) -> bool:
    """Whether XLA:TPU gathers ``value`` over ``axes`` for op ``op`` by a windowed loop
    (``PlatformRules.windows_loop_all_gathers``): ``op`` is a dot inside a loop body
    and the only reader of ``value``, or one of several dot readers that may window it
    where another may not. An operand every reader may window (a scanned layer's
    weight read by the recomputed forward dot and the backward one under
    ``jax.checkpoint`` over 16 devices) is all-gathered, the gathered value shared;
    over 32, where the forward's gather of the rows it contracts is not windowed
    (``windowed_contracting_devices``), the backward's is: the two gathers XLA:TPU
    runs for a checkpointed 1b or 7b layer's weights at 32x8."""
    graph = reader.graph
    if graph.op_name[op] != "stablehlo.dot_general" or next(loops_around(graph, op), None) is None:
        return False
    uses = graph.uses[value]
    if all(user == op for user, _ in uses):
        return True
    devices = _axis_devices(reader, tuple(sorted(axes)))
    if devices is None:
        return False

    def windows(user: int, index: int) -> bool:
        return graph.op_name[user] == "stablehlo.dot_general" and active_rules().windows_over(
            devices, _gathers_contracted(reader, user, index, axes))

    mine = [windows(user, index) for user, index in uses if user == op]
    return any(mine) and not all(windows(user, index) for user, index in uses)


def _gathered_axes(reader: ModuleValues, value: int, target: tuple | None) -> set[str]:
    """The mesh axes ``value``'s sharding has and a reshard to ``target`` drops."""
    sharding = reader.sharding(value)
    kept = {getattr(axis, "name", axis) for dim in target or () for axis in dim}
    return {axis.name for dim in sharding.dims for axis in dim.axes} - kept \
        if sharding is not None else set()


_OPERAND = re.compile(r"operand (\d+)")
_RETURNED = re.compile(r"result (\d+)")  # a returned value: the return's operand


def _axis_devices(reader: ModuleValues, axes: tuple[str, ...]) -> int | None:
    """The devices ``axes`` (names) span on a mesh of the module naming them all."""
    for mesh in reader.meshes.values():
        if axes and all(a in mesh.sizes for a in axes):
            return prod(mesh.sizes[a] for a in axes)
    return None


def _hoist_accumulated_all_reduces(reader: ModuleValues, sites: list[tuple[int, CommEntry]]
                                   ) -> list[tuple[int, CommEntry]]:
    """An all-reduce in a loop body whose result is only added into a carry that the body
    reads for nothing else (a scanned layer's weight gradient, summed over the steps)
    runs once after the loop, of the summed partial sums (XLA's
    ``WhileLoopAllReduceCodeMotion``): its runs are the loop's."""
    graph = reader.graph
    out = []
    for op, entry in sites:
        loop = next(loops_around(graph, op), None)
        if (entry.kind == ALL_REDUCE and entry.implicit and entry.runs and loop is not None
                and _accumulated(graph, op, loop)):
            trips = trip_count(graph, loop)
            if trips:
                entry = replace(entry, runs=entry.runs // trips,
                                reason=entry.reason + ", summed over the loop's trips and "
                                "all-reduced once after it")
        out.append((op, entry))
    return out


_ACCUMULATED_THROUGH = _LAYOUT_OPS - {"stablehlo.slice"} | {_CONSTRAINT}


def _accumulated(graph, op: int, loop: int) -> bool:
    """Whether ``op``'s one result is read only by an add into a carry of ``loop`` (the
    body's argument k, read by nothing else) that the body returns as carry k, through
    layout ops (XLA folds a dot's transposed result into the dot) and sharding
    constraints."""
    body_args, body_ops = graph.op_blocks[loop][1]
    if len(graph.op_results[op]) != 1 or op not in body_ops:
        return False
    value = graph.op_results[op][0]
    uses = graph.uses[value]
    while (len(uses) == 1 and graph.op_name[uses[0][0]] in _ACCUMULATED_THROUGH
           and len(graph.op_results[uses[0][0]]) == 1):
        value = graph.op_results[uses[0][0]][0]
        uses = graph.uses[value]
    if len(uses) != 1 or graph.op_name[uses[0][0]] != "stablehlo.add":
        return False
    add = uses[0][0]
    others = [v for v in graph.op_operands[add] if v != value]
    if len(others) != 1 or others[0] not in body_args:
        return False
    k = body_args.index(others[0])
    returned = graph.uses[graph.op_results[add][0]]
    return (len(graph.uses[others[0]]) == 1
            and returned == [(body_ops[-1], k)])


def _reassociate_all_reduces(reader: ModuleValues,
                             sites: list[tuple[int, CommEntry]]) -> list[tuple[int, CommEntry]]:
    """Drop the all-reduces XLA's reassociation folds: ``add(all-reduce(a),
    all-reduce(b))`` over the same axes and bytes is ``all-reduce(add(a, b))``, so
    of a sum of dots' all-reduced partial sums (an activation's gradient through
    several projections) one all-reduce is left, the first dot's. The same holds of
    reduce-scatters, which XLA forms after it from the all-reduce of the sum and its
    slice. A sharding constraint between a dot and the add that keeps its operand's
    sharding moves nothing (XLA's partitioner emits no op for it), so the sum is read
    through it."""
    graph = reader.graph
    reduced: dict[int, tuple[int, CommEntry]] = {}  # op -> (site index, its all-reduce)
    for index, (op, entry) in enumerate(sites):
        if (entry.kind in (ALL_REDUCE, REDUCE_SCATTER) and entry.implicit
                and graph.op_name[op] == "stablehlo.dot_general"):
            reduced[op] = (index, entry)
    moving = {op for op, _ in sites}
    dropped: set[int] = set()
    for op, name in enumerate(graph.op_name):
        if name != "stablehlo.add" or len(graph.op_operands[op]) != 2:
            continue
        found = [reduced.get(_through_constraints(reader, v, moving))
                 for v in graph.op_operands[op]]
        if None in found or found[0][0] == found[1][0]:
            continue
        (first, kept), (second, other) = sorted(found, key=lambda f: f[0])
        if (kept.kind, kept.axes, kept.bytes_per_device) \
                != (other.kind, other.axes, other.bytes_per_device):
            continue
        dropped.add(second)
        reduced[op] = (first, kept)  # the sum is all-reduced: it may be summed again
    return [site for index, site in enumerate(sites) if index not in dropped]


def _through_constraints(reader: ModuleValues, value: int, moving: set[int]) -> int:
    """The op defining ``value``, looking through the sharding constraints that keep
    their operand's sharding and move no data (not in ``moving``, the ops with
    collectives)."""
    graph = reader.graph
    op = graph.value_def[value]
    while (op >= 0 and graph.op_name[op] == _CONSTRAINT and op not in moving
           and reader.axes(graph.op_operands[op][0]) == reader.axes(value)):
        value = graph.op_operands[op][0]
        op = graph.value_def[value]
    return op



def _combine_all_reduces(reader: ModuleValues, sites: list[tuple[int, CommEntry]],
                         limit: int) -> list[tuple[int, CommEntry]]:
    """Mark the all-reduces XLA's all-reduce combiner merges: those of partial sums
    over the same axes whose results no later collective depends on (a step's
    gradients), so the scheduler can delay them together, in groups of at most
    ``limit`` bytes."""
    at_ops = {op for op, _ in sites}
    groups: dict[tuple[str, ...], int] = {}  # axes -> bytes of the open combined op
    out = []
    for op, entry in sites:
        combinable = (entry.kind == ALL_REDUCE and entry.implicit
                      and not _feeds_collective(reader.graph, op, at_ops))
        if combinable:
            open_bytes = groups.get(entry.axes)
            if open_bytes is not None and open_bytes + entry.bytes_per_device <= limit:
                groups[entry.axes] = open_bytes + entry.bytes_per_device
                entry = replace(entry, combined=True)
            else:
                groups[entry.axes] = entry.bytes_per_device
        out.append((op, entry))
    return out


def _feeds_collective(graph, op: int, at_ops: set[int]) -> bool:
    """Whether a value computed from op ``op``'s results reaches another op of
    ``at_ops`` (one with collectives) or a region-holding op's body."""
    seen, stack = {op}, [op]
    while stack:
        for value in graph.op_results[stack.pop()]:
            for user, _ in graph.uses[value]:
                while user >= 0 and user not in seen:
                    if user in at_ops:
                        return True
                    seen.add(user)
                    stack.append(user)
                    user = graph.op_parent[user]  # a use in a body is its owner's too
    return False


def _notes(reader: ModuleValues, trips: dict[int, int | None]) -> tuple[str, ...]:
    """What the prediction cannot see: unsharded callee and loop bodies."""
    names = reader.graph.op_name
    notes = []
    calls = sum(1 for name in names if name == "func.call")
    if calls:
        notes.append(f"{calls} func.call op(s) left: values inside callees without shardings "
                     "are assumed replicated, their communication may be missed")
    dynamic = sum(1 for op, name in enumerate(names)
                  if name == "stablehlo.while" and trip_count(reader.graph, op) is None)
    if any(trips.values()):
        notes.append("collectives in loop bodies count once in totals(), once per iteration "
                     "in step_totals()")
    if dynamic:
        notes.append(f"{dynamic} stablehlo.while op(s) without a static trip count: "
                     "collectives in their bodies count once, not once per iteration")
    return tuple(notes)


__all__ = ["BYTES", "BytesByOp", "CommEntry", "CommReport", "CommTotal", "as_compiled", "collective_bytes",
           "collective_bytes_at", "collectives_at", "entries_key", "explicit_entries",
           "comm_report", "comm_report_of", "note_reshard", "reuses_reshard"]
