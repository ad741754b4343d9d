"""What a propagated candidate costs: predicted collective bytes and memory peak.

``price`` is the cost model's verdict on a propagated module (``comm_report``'s
bytes, summed without describing its entries; ``memory_peak``);
``ModuleEvaluator`` propagates the imported module with a set of pins and
prices it, adding ``returned_in_declared_layout`` (see there) for the ops the
pins change.

The copies one search prices (whole modules and regions cut out of them) are
mostly the same ops with the same shardings: they share a ``CostMemo``
(``propagation.values``), so the cost model works out an op's collectives
and a value's shard bytes once per rule, types and shardings, not once per
copy. What depends on the copy as a whole (XLA's reuse of a value it already
resharded for an earlier op, ``ModuleValues.resharded``) is still read per copy.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from itertools import accumulate

from jaxlib.mlir import ir

from shardc.compiler.cost.fusion import FUSIBLE, fused_away
from shardc.compiler.cost.op_comm import op_communication
from shardc.compiler.cost.report import collective_bytes
from shardc.compiler.cost.reshard import dim_axes, reshard_tensor, shard_bytes
from shardc.compiler.cost_aware.candidates import (
    TAG,
    Pin,
    closed,
    op_tags,
    ops_by_tag,
    pinned_clone,
    tag_of,
)
from shardc.compiler.cost_aware.explicit import signature_values, signatures
from shardc.compiler.propagation import Propagation, SharedRead
from shardc.compiler.propagation.graph import PropagationGraph, ReadMemo
from shardc.compiler.propagation.values import CostMemo, ModuleValues
from shardc.compiler.sharding.rules import rule_for
from shardc.compiler.sharding.tensor import Tensor, format_per_value
from shardc.compiler.stages.hlo_order import jax_ordered
from shardc.dialects.sdy import SHARDING_RULE_ATTR


def price(reader: ModuleValues) -> tuple[int, int]:
    """Predicted collective bytes per device and memory peak of a propagated module
    (priced again from ``reader.priced_from`` where set: ``cost.report.BytesByOp``,
    ``LiveSizes``)."""
    return collective_bytes(reader), memory_peak(reader)


def memory_peak(reader: ModuleValues) -> int:
    """Per-device bytes live at the worst point of program (pre-order) order.

    A value is live from its definition (block arguments: from the start of
    the program) to its last use; tensors count their shard bytes. A value XLA
    fuses into all its consumers (``cost.fusion``) has no buffer and is not
    counted: a pin that shards the residual stream by batch instead of by the
    FSDP axis replicates the small broadcast scale and bias vectors of every
    layer norm, which XLA never materialises; counted, they made the pin look
    0.2% heavier where XLA's memory fell by 30% (``lm_linen_unconstrained``).

    With ``reader.costs`` the sizes are kept in ``reader.priced`` (``LiveSizes``);
    with ``reader.priced_from``, what was kept of another copy of the same read,
    only the values whose sharding may differ are sized again.
    """
    since = reader.priced_from and reader.priced_from.get(MEMORY)
    if since is not None and since.holds_for(reader):
        return since.peak_of(reader)
    ranges = _live_ranges(reader)
    sizes = [_live_size(reader, value) for value, _, _ in ranges]
    delta = [0] * (len(reader.graph.ops) + 2)
    for (_, start, stop), size in zip(ranges, sizes):
        delta[start] += size
        delta[stop] -= size
    if reader.costs is not None:
        reader.priced[MEMORY] = LiveSizes(reader.facts, list(reader.store.sid), sizes, delta)
    return max(0, *accumulate(delta))


MEMORY = "memory"  # ``memory_peak``'s part of ``ModuleValues.priced``


def _live_size(reader: ModuleValues, value: int) -> int:
    """Per-device bytes of ``value`` (memoised in ``reader.costs.sizes`` by type and
    sharding)."""
    sizes = reader.costs.sizes if reader.costs is not None else None
    if sizes is None:
        return _size(reader.tensor(value))
    key = (reader.graph.value_type_key[value], reader.sharding_id(value))
    size = sizes.get(key)
    if size is None:
        size = sizes[key] = _size(reader.tensor(value))
    return size


@dataclass
class LiveSizes:
    """``memory_peak``'s sizes of one propagated copy, by live range, so that another
    copy of the same read (a cost-aware candidate) sizes again only the values whose
    sharding may differ: those whose store slot holds another sharding id, and every
    loop body argument the store holds none for (it reads the loop's result)."""

    facts: dict  # the readers' ``ModuleValues.facts``: one graph and store layout
    sid: list[int]  # the store's sharding ids (``ShardingStore.sid``) when sized
    sizes: list[int]  # per ``_live_ranges`` entry
    delta: list[int]  # the sizes added at each range's start, taken at its stop

    def holds_for(self, reader: ModuleValues) -> bool:
        """Whether ``reader`` reads a propagation of the same read (``peak_of``)."""
        return (reader.costs is not None and reader.facts is self.facts
                and len(reader.store.sid) == len(self.sid))

    def peak_of(self, reader: ModuleValues) -> int:
        """``memory_peak(reader)``, sizing again only what may differ (see the class)."""
        ranges = _live_ranges(reader)
        by_slot, loops = _ranges_by_slot(reader)
        again = set(loops)
        for slot in reader.changed_slots(self.sid):
            again.update(by_slot.get(slot, ()))
        delta = None
        for k in again:
            value, start, stop = ranges[k]
            size = _live_size(reader, value)
            if size != self.sizes[k]:
                if delta is None:
                    delta = list(self.delta)
                delta[start] += size - self.sizes[k]
                delta[stop] -= size - self.sizes[k]
        return max(0, *accumulate(self.delta if delta is None else delta))


def _ranges_by_slot(reader: ModuleValues) -> tuple[dict[int, list[int]], list[int]]:
    """Store slot -> the ``_live_ranges`` entries of the values read from it, and the
    entries of loop body arguments (``LiveSizes``): the graph's alone, kept in
    ``reader.facts``."""
    found = reader.facts.get("live ranges by slot")
    if found is None:
        read_slot = reader.store.read_slot
        by_slot: dict[int, list[int]] = {}
        loops = []
        for k, (value, _, _) in enumerate(_live_ranges(reader)):
            by_slot.setdefault(read_slot[value], []).append(k)
            if reader.reads_loop_result(value):
                loops.append(k)
        found = reader.facts["live ranges by slot"] = (by_slot, loops)
    return found


def _live_ranges(reader: ModuleValues) -> list[tuple[int, int, int]]:
    """``(value, first op, op after the last use)`` of each value ``memory_peak``
    counts: the graph's alone, kept in ``reader.facts``."""
    ranges = reader.facts.get("live ranges")
    if ranges is not None:
        return ranges
    graph = reader.graph
    ranges = reader.facts["live ranges"] = []
    names, shapes = graph.op_name, graph.value_shape
    places = _jax_places(graph)
    for value, producer in enumerate(graph.value_def):
        if shapes[value] is None:  # not a static tensor
            continue
        uses = graph.uses[value]
        if (producer >= 0 and names[producer] in FUSIBLE
                and fused_away(names[producer], (names[user] for user, _ in uses))):
            continue
        start = places[producer] if producer >= 0 else 0
        end = max([places[user] for user, _ in uses]) if uses else start
        ranges.append((value, start, end + 1))
    return ranges


def _jax_places(graph: PropagationGraph) -> list[int] | range:
    """Each op's place in the program as jax wrote it (pre-order).

    Propagation reads blocks in XLA's order (``hlo_order``), but XLA's memory
    follows the program's own order, which the memory estimate reads once
    ``restore_jax_order`` has put the ops back: the search's peak is taken in
    that order too, read through ``jax_ordered`` as the liveness walk reads it.
    """
    ordered = jax_ordered(graph)
    if ordered is graph:
        return range(len(graph.ops))
    places = [0] * len(graph.ops)
    place = 0
    stack = [iter([i for i, parent in enumerate(graph.op_parent) if parent == -1])]
    while stack:
        i = next(stack[-1], None)
        if i is None:
            stack.pop()
            continue
        places[i] = place
        place += 1
        if ordered.op_blocks[i]:
            stack.append(iter([j for _, nested in ordered.op_blocks[i] for j in nested]))
    return places


def _size(tensor: Tensor) -> int:
    """Bytes of ``tensor``'s shard (of the whole tensor when it has no sharding)."""
    if tensor.sharding is None:
        return tensor.global_bytes
    return shard_bytes(tensor.shape, tensor.element_bytes,
                       dim_axes(tensor.sharding, len(tensor.shape)))


def _collective_bytes(collectives) -> int:
    return sum(c.bytes_per_device for c in collectives)


def returned_in_declared_layout(reader: ModuleValues, changed: set[int],
                                only_results: frozenset[int] | None = None) -> int:
    """Extra bytes if XLA computes each changed op returned in another layout in the declared one.

    A changed op gets explicit operand reshards at export (``explicit``), but
    when its result is resharded again at ``func.return``, XLA may compute the
    op directly in the returned layout from the explicitly resharded operands
    (then gathering another operand) instead of computing it as exported and
    resharding the result (found on the mismatched MLP and an FSDP pair: a
    predicted saving compiled to more bytes than Shardy). So the op is priced
    both ways: (a) as exported plus the return reshard (``comm_report``), and
    (b) operands resharded as exported, then the op with the declared result
    sharding, no return reshard. The sum of the positive ``(b) - (a)`` over
    those ops is returned; the search prices a candidate at the worse of the two.
    ``only_results`` limits it to those result positions (a region's real returns).
    """
    if not changed:
        return 0
    graph, store = reader.graph, reader.store
    extra = 0
    for ret in range(len(graph.ops)):
        if graph.op_name[ret] != "func.return":
            continue
        parent = graph.op_parent[ret]
        if graph.op_name[parent] != "func.func":
            continue
        results = store.func_results[parent]
        seen = set()
        for k, value in enumerate(graph.op_operands[ret]):
            op = graph.value_def[value]
            if only_results is not None and k not in only_results:
                continue
            if (op < 0 or op in seen or k >= len(results) or tag_of(reader, op) not in changed
                    or len(graph.op_results[op]) != 1 or graph.op_blocks[op]):
                continue
            rule = rule_for(graph.ops[op])
            declared = store.value[results[k]]
            result = reader.tensor(value)
            operands = [reader.tensor(v) for v in graph.op_operands[op]]
            if (rule is None or declared is None or result is None or result.sharding is None
                    or any(t is None or t.sharding is None for t in operands)):
                continue
            if dim_axes(declared, len(result.shape)) == dim_axes(result.sharding,
                                                                   len(result.shape)):
                continue
            seen.add(op)
            mesh = reader.mesh_of(result.sharding, *(t.sharding for t in operands))
            needs = op_communication(rule, operands, [result], mesh, op_name=graph.op_name[op])
            exported = _collective_bytes(n.collective for n in needs)
            exported += _collective_bytes(reshard_tensor(
                result, declared, reader.mesh_of(result.sharding, declared)))
            resharded = list(operands)
            explicit = 0
            for need in needs:
                if need.operand is not None and need.target is not None:
                    t = operands[need.operand]
                    resharded[need.operand] = replace(
                        t, sharding=closed(t.sharding.mesh, need.target))
                    explicit += need.collective.bytes_per_device
            direct = replace(result, sharding=declared)
            again = op_communication(rule, resharded, [direct],
                                     reader.mesh_of(declared, *(t.sharding for t in resharded)),
                                     op_name=graph.op_name[op])
            in_declared = explicit + _collective_bytes(n.collective for n in again)
            extra += max(0, in_declared - exported)
    return extra


# Modules from this many ops on re-propagate each copy from a recorded one: a step
# computed again costs about ten memoised ones, so following what a pin reaches pays
# where it reaches a small share of the module (a layer of a deep model), not in a
# region or a small module, where it reaches most of it.
INCREMENTAL_OPS = 1024


class PinnedCopies:
    """The copies of one module with pins (``pinned_clone``), propagated with user
    priorities and read.

    A pin only sets the ``sdy.sharding`` of an op: every copy has the module's
    ops, values and rules, only some starting shardings differ. So the module
    is read once (``propagation.SharedRead``, from a clone: the use-lists,
    which order the worklist, are a clone's in every copy) and each copy is
    propagated on that read with its pins as starting shardings
    (``ModuleValues.propagated_on``); the copy itself is made only if its
    reader is written back (the search keeps it). Where the read cannot stand
    for a copy, the copy is propagated, as it is where it is written at once.
    The module must not change once a copy is propagated on the read.

    ``graph``: the module's graph, where its maker has it without the module
    (``regions.region_graph``: the graph of a module whose use-lists are already a
    clone's, and whose ops carry ``pins``): the read is taken from it, starting from
    ``pins`` as if its ops carried them, and ``make`` makes the module only if a copy
    must be made, or where a pin cannot be read that way (then the module is read);
    ``tags``: its ops' numbers (``op_tags``), where the maker has them.

    ``opened`` gives the copies of a variant of the module whose only function
    leaves some arguments and results without a sharding: the same graph, so
    they are propagated on the same read, and that module is made only if a
    copy of it must be.
    """

    def __init__(self, module: ir.Operation | ir.Module | None, conservative: bool,
                 costs: CostMemo, graph: PropagationGraph | None = None, *,
                 tags: list[int | None] | None = None, pins: list[Pin] = (),
                 make: Callable[[], ir.Operation | ir.Module] | None = None):
        self.owner = module  # kept alive: an ``ir.Module`` owns its operation
        self.conservative = conservative
        self.costs = costs
        self._graph = graph
        self._tags = tags  # ``graph``'s ``op_tags``
        self._pins = list(pins)  # the pins ``make``'s module carries, read as starts
        # Makes the module (``regions.cut_out``, ``opened``): built op by op in program
        # order, operands in order, so its use-lists are already those of a clone of it
        # and its read needs no clone to read its copies' worklist order.
        self._make = make
        self._ops: dict[int, list[ir.Operation]] | None = None  # ``tagged``, when first asked
        self._read: SharedRead | None = None
        self._indices: dict[int, list[int]] = {}  # the read's graph ops by tag
        # The first propagation on the read since ``rebase``, recorded: the later ones
        # re-propagate only what differs from it (``propagation.incremental``).
        self._base: Propagation | None = None
        # Positions of the function's arguments and results read without a sharding.
        self._unsharded: tuple[frozenset[int], frozenset[int]] = (frozenset(), frozenset())
        self._facts_of: ModuleValues | None = None  # ``share_facts``'s reader

    @property
    def module(self) -> ir.Operation:
        if self.owner is None:
            self.owner = self._make()
        return self.owner.operation

    def opened(self, arguments: frozenset[int], results: frozenset[int],
               make: Callable[[], ir.Operation | ir.Module]) -> PinnedCopies:
        """The copies of this module but with the function's ``arguments`` and ``results``
        (positions) carrying no sharding, a module ``make`` makes (only when a copy of it
        must be made)."""
        self._shared_read()
        opened = PinnedCopies(None, self.conservative, self.costs, make=make)
        opened._read, opened._indices = self._read, self._indices
        opened._unsharded = (arguments, results)
        return opened

    @property
    def tagged(self) -> dict[int, list[ir.Operation]]:
        """``ops_by_tag`` of the module, walked for once."""
        if self._ops is None:
            self._ops = ops_by_tag(self.module)
        return self._ops

    def _pinned_clone(self, pins: list[Pin]) -> ir.Operation:
        return pinned_clone(self.module, self.tagged, pins)

    def propagated(self, pins: list[Pin], *, write: bool) -> ModuleValues:
        """The copy with ``pins`` propagated and read (``ModuleValues.propagated``)."""
        reader = None if write else self._propagated_on_read(pins)
        if reader is None:
            with self.module.context:
                copy = self._pinned_clone(pins)
                reader = ModuleValues.propagated(copy.operation, plan="user-priority",
                                                 conservative=self.conservative,
                                                 missing_as_replicated=True, costs=self.costs,
                                                 write=write)
        return reader

    def rebase(self) -> None:
        """Record the next propagation on the read and re-propagate the later ones from
        it (the search calls it when it keeps a candidate: the next ones add to its pins)."""
        self._base = None

    def share_facts(self, reader: ModuleValues) -> None:
        """Let the read start from the facts (``ModuleValues.facts``) of ``reader``, a
        copy of the module propagated and read apart (the search's baseline, written
        at once), instead of deriving them again.

        A copy has the module's ops, values, rules and store slots; only shardings
        differ, and facts hold what the cost model derives from the rest. They are
        taken only where the read's graph and slots are indeed the copy's.
        """
        self._facts_of = reader

    def _shared_read(self) -> SharedRead:
        if self._read is None:
            graph, self._graph = self._graph, None
            if graph is not None:
                self._read = self._read_of(graph, tags=self._tags)
                if not self._started(self._pins):
                    self._read, self._indices = None, {}  # the module is read below
        if self._read is None:
            # Read from a clone: the use-lists, which order the worklist, are then a
            # copy's. The module is never written while its read lives (a pin is set on
            # it only while ``pinned_clone`` clones it), so a module in clone order is read
            # itself.
            module = self.module if self._make is not None else self.module.clone()
            source, self._facts_of = self._facts_of, None
            graph = None
            if source is not None:
                # The copy ``source`` reads is a clone of the module too: its graph but for
                # the bindings.
                graph = PropagationGraph.of_clone(module.operation, source.graph,
                                                  conservative=self.conservative,
                                                  memo=self.costs.reads)
            self._read = self._read_of(graph, module)
            if source is not None and _same_layout(source, self._read):
                self._read.facts = source.facts
        return self._read

    def _read_of(self, graph: PropagationGraph | None, module: ir.Operation | None = None,
                 tags: list[int | None] | None = None) -> SharedRead:
        read = SharedRead(module if graph is None else graph.module,
                          conservative=self.conservative, memo=self.costs.reads, graph=graph)
        if tags is not None:
            read.facts[TAG] = tags  # as ``op_tags`` would read them
        for op, tag in enumerate(op_tags(read.facts, read.graph)):
            if tag is not None:
                self._indices.setdefault(tag, []).append(op)
        return read

    def _started(self, pins: list[Pin]) -> bool:
        """Whether the read's store starts from ``pins`` as a read of a module whose ops
        carry them would (``ShardingStore.start``)."""
        store = self._read.store
        with self._read.graph.module.context:
            for tag, pin in {pin.op: pin for pin in pins}.items():  # as ``apply_pins``
                attribute = None
                for op in self._indices.get(tag, ()):
                    if attribute is None:
                        attribute = ir.Attribute.parse(format_per_value([pin.sharding]))
                    if not store.start(op, attribute):
                        return False
        return True

    def _propagated_on_read(self, pins: list[Pin]) -> ModuleValues | None:
        read = self._shared_read()
        context = read.graph.module.context
        with context:
            starts = {}
            for tag, pin in {pin.op: pin for pin in pins}.items():  # the last pin of an op wins
                found = self._indices.get(tag, ())
                if found:
                    attribute = ir.Attribute.parse(format_per_value([pin.sharding]), context)
                    for op in found:
                        starts[op] = attribute
            if self._base is None and read.usable and len(read.graph.ops) >= INCREMENTAL_OPS:
                # Re-propagated from itself below: a copy of its store, no step again.
                self._base = read.recorded("user-priority", starts, self._unsharded)
            return ModuleValues.propagated_on(
                read, starts, lambda: self._pinned_clone(pins), unsharded=self._unsharded,
                plan="user-priority", missing_as_replicated=True, costs=self.costs,
                base=self._base)


def write_back(reader: ModuleValues) -> None:
    """``reader.write_back()``, keeping its facts (``ModuleValues.facts``) where it then
    reads the copy it stood for: the same ops, values and store slots (the store
    moves to it), so what the cost model derived from the read holds for the copy."""
    facts, names = reader.facts, reader.graph.op_name
    reader.write_back()
    if reader.facts is not facts and reader.graph.op_name == names:
        reader.facts = facts


def _same_layout(reader: ModuleValues, read: SharedRead) -> bool:
    """Whether ``read`` numbers ops, values and store slots as ``reader`` does."""
    return (reader.graph.op_name == read.graph.op_name
            and reader.store.read_slot == read.store.read_slot)


class ModuleEvaluator:
    """Prices a set of pins on the whole module: propagate a copy of it (``PinnedCopies``),
    then price it.

    The first call (no pins) records the baseline signatures, against which
    later calls find the ops a candidate changes (``returned_in_declared_layout``),
    and attaches its rules to the imported module (``attach_rules``).
    Each call returns ``(bytes, memory peak, reader)``; the reader keeps its
    propagated module alive, so the search can adopt the winner's module
    instead of propagating it again. A candidate's module is written only
    then (``ModuleValues.write_back``): most are priced and dropped.
    """

    def __init__(self, imported: ir.Operation, conservative: bool):
        self.imported = imported
        self.conservative = conservative
        self.count = 0
        self.baseline: dict[int, tuple] | None = None
        # Every copy reads the same rules and shardings again, and the cost model
        # finds the same at most ops.
        self.costs = CostMemo(ReadMemo())
        self._copies: PinnedCopies | None = None
        self._baseline_priced: dict | None = None  # what was kept of the first call's price
        # The first call's facts and store sharding ids, which ``baseline`` was read from.
        self._baseline_slots: tuple[dict, list[int]] | None = None

    @property
    def tagged(self) -> dict[int, list[ir.Operation]]:
        """The imported module's ops by number (``ops_by_tag``): walked for once, by the
        first call."""
        return self._copies.tagged

    def rebase(self) -> None:
        """Re-propagate later candidates from the next one (``PinnedCopies.rebase``)."""
        if self._copies is not None:
            self._copies.rebase()

    def changed(self, reader: ModuleValues) -> set[int]:
        """``changed_tags(self.baseline, reader)``, reading again only the ops whose
        shardings may differ from the baseline's."""
        return changed_tags(self.baseline, reader, self._baseline_slots)

    def __call__(self, pins: list[Pin]) -> tuple[int, int, ModuleValues]:
        self.count += 1
        if self._copies is None:
            self._copies = PinnedCopies(self.imported, self.conservative, self.costs)
        reader = self._copies.propagated(pins, write=not pins)
        # A candidate is priced again only where its shardings differ from the baseline's.
        reader.priced_from = self._baseline_priced
        total, peak = price(reader)
        if self.baseline is None:
            self._baseline_priced = reader.priced
            self.baseline = signatures(reader)
            self._baseline_slots = (reader.facts, list(reader.store.sid))
            attach_rules(self.imported, reader, self._copies.tagged)
            self._copies.share_facts(reader)
        elif pins:
            total += returned_in_declared_layout(reader, self.changed(reader))
        return total, peak, reader


def attach_rules(imported: ir.Operation, propagated: ModuleValues,
                 tagged: dict[int, list[ir.Operation]] | None = None) -> None:
    """Give each numbered op of ``imported`` the ``sdy.sharding_rule`` propagation
    attached to it in ``propagated`` (a copy of it); ``tagged``: ``ops_by_tag(imported)``,
    where the caller has it.

    A pin changes shardings, never an op's rule, so the copies propagated later
    read each rule back instead of computing it and attaching it again.
    """
    graph = propagated.graph
    rules = {}
    for op, ir_op in enumerate(graph.ops):
        tag = tag_of(propagated, op)
        if tag is not None and SHARDING_RULE_ATTR in ir_op.attributes:
            rules[tag] = ir_op.attributes[SHARDING_RULE_ATTR]

    if tagged is None:
        tagged = ops_by_tag(imported)
    for tag, ops in tagged.items():
        rule = rules.get(tag)
        if rule is not None:
            for op in ops:
                op.attributes[SHARDING_RULE_ATTR] = rule


def changed_tags(baseline: dict[int, tuple], reader: ModuleValues,
                 since: tuple[dict, list[int]] | None = None) -> set[int]:
    """Tags of the ops whose operand/result shardings differ from the baseline's.

    ``since``: the ``ModuleValues.facts`` and store sharding ids of the reader
    ``baseline`` was read from. Where ``reader`` shares those facts (the same
    graph and store layout), only the ops with a value whose store slot holds
    another sharding id, or a loop body argument (it reads the loop's result
    where the store holds none for it), are read again: the others read what
    the baseline read.
    """
    if since is None or since[0] is not reader.facts or len(since[1]) != len(reader.store.sid):
        return {tag for tag, sig in signatures(reader).items() if baseline.get(tag) != sig}
    ops, by_slot, loops = _signature_slots(reader)
    again = set(loops)
    for slot in reader.changed_slots(since[1]):
        again.update(by_slot.get(slot, ()))
    axes = reader.axes
    changed = set()
    for k in again:
        tag, values = ops[k]
        if baseline.get(tag) != tuple([axes(value) for value in values]):
            changed.add(tag)
    return changed


def _signature_slots(reader: ModuleValues) -> tuple[list, dict[int, list[int]], list[int]]:
    """``signatures``' ops (``(tag, values)``), the store slot -> the ops with a value
    read from it, and the ops with a loop body argument: the graph's alone, kept in
    ``reader.facts``."""
    found = reader.facts.get("signature slots")
    if found is None:
        ops = signature_values(reader)[0]
        read_slot = reader.store.read_slot
        by_slot: dict[int, list[int]] = {}
        loops = []
        for k, (_, values) in enumerate(ops):
            for value in values:
                by_slot.setdefault(read_slot[value], []).append(k)
            if any(map(reader.reads_loop_result, values)):
                loops.append(k)
        found = reader.facts["signature slots"] = (ops, by_slot, loops)
    return found
