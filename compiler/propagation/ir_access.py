"""Where each value's sharding lives, read once from the IR and written back once.

``ShardingStore`` gives every shardable value a *slot*: func
argument and result attributes, per-value ``sdy.sharding`` lists of op
results (with open placeholders for siblings when one entry is first
written), the own attribute of ``sdy.sharding_constraint``/``sdy.reshard``/
``sdy.data_flow_edge``, and named-computation in/out shardings. Values that
a data-flow edge owns (edge owners and non-owner targets, e.g. while body
arguments) are redirected to the edge's slot. Values with no slot (block
arguments of reduce bodies, ...) read as None and ignore writes.
``write_back`` applies dirty slots, erased ops and sharding-rule attributes
to the IR in one go.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable

from jaxlib.mlir import ir

from shardc.compiler.propagation.data_flow_ops import DATA_FLOW_OPS
from shardc.compiler.propagation.graph import PropagationGraph
from shardc.compiler.propagation.manual import (
    MANUAL_OP,
    add_free_axes,
    erase_manual_axes,
    manual_axes_of,
)
from shardc.compiler.sharding.tensor import (
    MeshInfo,
    TensorSharding,
    format_per_value,
    format_sharding,
    open_sharding,
    parse_mesh,
    parse_per_value,
    parse_sharding,
)
from shardc.dialects import sdy
from shardc.dialects.sdy import SHARDING_ATTR, SHARDING_RULE_ATTR

EDGE_OP = "sdy.data_flow_edge"
_OWN_ATTR = {
    "sdy.data_flow_edge": "sharding",
    "sdy.reshard": "sharding",
    "sdy.sharding_constraint": "sharding",
    "sdy.all_gather": "out_sharding",
    "sdy.all_reduce": "out_sharding",
    "sdy.all_slice": "out_sharding",
    "sdy.all_to_all": "out_sharding",
    "sdy.collective_permute": "out_sharding",
    "sdy.reduce_scatter": "out_sharding",
}
ARG, RES, PER_VALUE, OWN, MANUAL_IN = 0, 1, 2, 3, 4
# Ops whose shardings live elsewhere than a per-value ``sdy.sharding`` of their results.
_SPECIAL_SLOTS = frozenset({"func.func", "sdy.named_computation", MANUAL_OP, *_OWN_ATTR})


def read_meshes(module: ir.Operation) -> dict[str, MeshInfo]:
    """The module's ``sdy.mesh`` symbols by name."""
    meshes = {}
    for op in module.regions[0].blocks[0].operations:
        if op.operation.name == "sdy.mesh":
            name = ir.StringAttr(op.attributes["sym_name"]).value
            meshes[name] = parse_mesh(name, str(op.attributes["mesh"]))
    return meshes


def _dict_entries(attr: ir.Attribute) -> dict[str, ir.Attribute]:
    entries = ir.DictAttr(attr)
    return {entries[i].name: entries[i].attr for i in range(len(entries))}


def _dict_entry(attr: ir.Attribute, name: str) -> ir.Attribute | None:
    """The entry ``name`` of a dictionary attribute (None when absent)."""
    entries = ir.DictAttr(attr)
    return entries[name] if name in entries else None


class ShardingStore:
    """Current shardings by slot, plus the edge and func facts the driver needs."""

    def __init__(self, graph: PropagationGraph):
        self.graph = graph
        self.meshes = read_meshes(graph.module)
        n = len(graph.values)
        self.storage = list(range(n))
        self.slot_of: list[int] = [-1] * n
        self.value: list[TensorSharding | None] = []
        self.where: list[tuple] = []
        self.rank: list[int] = []
        self.siblings: list[tuple[int, ...]] = []
        self.dirty: set[int] = set()
        # Interned shardings: ``sid[slot]`` is a small int naming ``value[slot]``
        # (0 for None), equal ints for equal shardings, so steps can be memoised
        # on tuples of ints instead of hashing nested tuples each time. The ids
        # are shared by every store of one ``ReadMemo``, as the step memo is.
        self.sid: list[int] = []
        self._intern = graph.memo.bind_steps(self.meshes).sharding_ids
        self._parsed = graph.memo.shardings
        # The shardings written on function boundaries, by attribute: what parsing
        # the attribute would give (the export stage reads them there).
        self._written: dict[int, TensorSharding] = {}
        # Steps that wrote nothing are not repeated on unchanged shardings:
        # ``settled[op]`` is the head (``Driver``'s memo key without the
        # shardings) of op's last step if it wrote nothing, reset to -1 by any
        # write to a slot in ``readers`` of op (the slots its step reads).
        self.readers: list[list[int]] = []
        self.settled: list[int] = [-1] * len(graph.ops)
        self.func_results: dict[int, list[int]] = {}
        self.funcs: list[int] = []
        self.edge_sources: dict[int, list[int]] = {}
        self.edge_targets: dict[int, list[int]] = {}
        # manual computation op -> (manual axes, in shardings, out shardings) as read
        self.manual: dict[int, tuple[tuple[str, ...], list, list]] = {}
        # edge op on a manual computation -> (manual axes, outer sharding, is block arg)
        self.manual_in_slots: dict[int, list[int]] = {}
        self.edge_view: dict[int, tuple[tuple[str, ...], TensorSharding | None, bool]] = {}
        self._attr_cache: dict[str, ir.Attribute] = {}
        self.erase_log: list[int] = []
        # op -> the ``sdy.sharding`` it carries (ops without one are absent): as read,
        # as ``start`` gave it, then as ``write_back`` wrote it. What a walk of the
        # written module would read there, for a caller that reads it after
        # propagation (the export stage's census) without reading every op again.
        self.sharding_attrs: dict[int, ir.Attribute] = {}
        # Every write, ``(slot, sharding, sid, primary)`` (primary: the slot written,
        # not a sibling given a placeholder), while a run is recorded (``incremental``).
        self.log: list[tuple] | None = None
        self._assign_slots()
        self._assign_edges()
        # An always-empty slot id for values without a slot (never written).
        self.none_slot = len(self.sid)
        self.sid.append(0)
        self.value.append(None)
        self.readers.append([])
        # The slot a step reads for each value: its own, else the none-slot.
        self.read_slot = [slot if slot >= 0 else self.none_slot for slot in self.slot_of]

    # ------------------------------------------------------------------ copies
    def fresh_copy(self, readers: list[list[int]] | None = None) -> ShardingStore:
        """This store as read, before any propagation step, for another run on its graph
        (``propagation.SharedRead``): the shardings and what steps write are copied,
        where each value's sharding lives is shared (steps never change it).

        ``readers``: the slot readers of a complete earlier run's store, for a run whose
        driver reuses that run's (``Driver(after=...)`` shares them): not built empty
        only to be replaced (a list per slot, most of a small run's copying)."""
        fresh = copy.copy(self)
        fresh.value = list(self.value)
        fresh.sid = list(self.sid)
        fresh.dirty = set()
        fresh.readers = [[] for _ in self.readers] if readers is None else readers
        fresh.settled = [-1] * len(self.settled)
        fresh.erase_log = []
        fresh.log = None
        fresh.sharding_attrs = dict(self.sharding_attrs)
        return fresh

    def start(self, op: int, attribute: ir.Attribute) -> bool:
        """Read op ``op``'s result sharding from ``attribute`` (an ``sdy.sharding``
        per-value attribute) as if the op carried it; False (nothing changed) unless
        the op has one result whose sharding is read from that attribute."""
        found = self.start_slot(op, attribute)
        if found is None:
            return False
        slot, sharding = found
        self.value[slot] = sharding
        self.sid[slot] = self.intern(sharding)
        self.sharding_attrs[op] = attribute
        return True

    def start_slot(self, op: int, attribute: ir.Attribute) -> tuple[int, TensorSharding] | None:
        """The slot ``start(op, attribute)`` would write and what, without writing it
        (None where it would refuse)."""
        results = self.graph.op_results[op]
        if len(results) != 1:
            return None
        slot = self.slot_of[results[0]]
        if slot < 0 or self.where[slot] != (PER_VALUE, op, SHARDING_ATTR, 0):
            return None
        parsed = self._parse_per_value(attribute)
        if len(parsed) != 1:
            return None
        return slot, parsed[0]

    def start_unsharded(self, arguments: Iterable[int], results: Iterable[int]) -> bool:
        """Read the arguments and results at these positions of the module's function as
        if they carried no sharding; False (nothing changed) unless the module has one
        function, with those positions."""
        slots = self.unsharded_slots(arguments, results)
        if slots is None:
            return False
        for slot in slots:
            self.value[slot] = None
            self.sid[slot] = 0
        return True

    def unsharded_slots(self, arguments: Iterable[int], results: Iterable[int]
                        ) -> list[int] | None:
        """The slots ``start_unsharded(arguments, results)`` would clear, without
        clearing them (None where it would refuse)."""
        if len(self.funcs) != 1:
            return None
        func = self.funcs[0]
        blocks = self.graph.op_blocks[func]
        args = blocks[0][0] if blocks else []
        slots = []
        for k in arguments:
            slot = self.slot_of[args[k]] if k < len(args) else -1
            if slot < 0 or self.where[slot] != (ARG, func, k):
                return None
            slots.append(slot)
        returned = self.func_results[func]
        for k in results:
            if k >= len(returned):
                return None
            slots.append(returned[k])
        return slots

    def moved_to(self, graph: PropagationGraph) -> None:
        """Write back onto ``graph`` from now on: a graph of a copy of this store's
        module (the same ops in the same order), e.g. one that carries the starting
        shardings ``start`` only stored."""
        if graph.op_name != self.graph.op_name:
            raise AssertionError("the graph is not one of a copy of the store's module")
        self.graph = graph

    # ------------------------------------------------------------------ slots
    def _new_slot(self, where: tuple, rank: int, sharding: TensorSharding | None) -> int:
        self.where.append(where)
        self.rank.append(rank)
        self.value.append(sharding)
        self.sid.append(self.intern(sharding))
        self.siblings.append(())
        self.readers.append([])
        return len(self.where) - 1

    def intern(self, sharding: TensorSharding | None) -> int:
        """The small int naming ``sharding`` (0 for None)."""
        if sharding is None:
            return 0
        sid = self._intern.get(sharding)
        if sid is None:
            sid = self._intern[sharding] = len(self._intern) + 1
        return sid

    # Parsed attributes are cached on the attribute's hash, its uniqued storage
    # pointer: equal pointers are the same attribute (and printing costs more).
    def _parse(self, attr: ir.Attribute | None) -> TensorSharding | None:
        if attr is None:
            return None
        key = hash(attr)
        parsed = self._parsed.get(key)
        if parsed is None:
            parsed = self._parsed[key] = parse_sharding(str(attr), self.meshes)
        return parsed

    def parsed(self, attr: ir.Attribute) -> TensorSharding:
        """The sharding ``attr`` (a function argument's or result's, as read or as
        written back) holds, parsed once."""
        written = self._written.get(hash(attr))
        return written if written is not None else self._parse(attr)

    def _parse_per_value(self, attr: ir.Attribute) -> list[TensorSharding]:
        key = hash(attr)
        parsed = self._parsed.get(key)
        if parsed is None:
            parsed = self._parsed[key] = parse_per_value(str(attr), self.meshes)
        return parsed

    def _per_value_slots(self, op: int, attr_name: str, values: list[int]) -> None:
        self._per_value_attr_slots(op, attr_name, values,
                                   self.graph.ops[op].attributes.get(attr_name))

    def _per_value_attr_slots(self, op: int, attr_name: str, values: list[int],
                              attr: ir.Attribute | None) -> None:
        graph = self.graph
        parsed = None
        if attr is not None:
            parsed = self._parse_per_value(attr)
            if attr_name == SHARDING_ATTR:
                self.sharding_attrs[op] = attr
        slots = []
        for k, value in enumerate(values):
            sharding = parsed[k] if parsed is not None else None
            slot = self._new_slot((PER_VALUE, op, attr_name, k), graph.value_rank(value), sharding)
            self.slot_of[value] = slot
            slots.append(slot)
        for slot in slots:
            self.siblings[slot] = tuple(slots)

    def _func_slots(self, op: int) -> None:
        graph = self.graph
        func = graph.ops[op]
        self.funcs.append(op)
        args = graph.op_blocks[op][0][0] if graph.op_blocks[op] else []
        arg_attrs = list(ir.ArrayAttr(func.attributes["arg_attrs"])) if (
            "arg_attrs" in func.attributes) else []
        for k, value in enumerate(args):
            entry = _dict_entry(arg_attrs[k], SHARDING_ATTR) if k < len(arg_attrs) else None
            self.slot_of[value] = self._new_slot(
                (ARG, op, k), graph.value_rank(value), self._parse(entry))
        res_attrs = list(ir.ArrayAttr(func.attributes["res_attrs"])) if (
            "res_attrs" in func.attributes) else []
        func_type = ir.FunctionType(ir.TypeAttr(func.attributes["function_type"]).value)
        slots = []
        for k, result_type in enumerate(func_type.results):
            entry = _dict_entry(res_attrs[k], SHARDING_ATTR) if k < len(res_attrs) else None
            rank = result_type.rank if isinstance(result_type, ir.RankedTensorType) else 0
            slots.append(self._new_slot((RES, op, k), rank, self._parse(entry)))
        self.func_results[op] = slots

    def _assign_slots(self) -> None:
        graph = self.graph
        ops, shapes, slot_of = graph.ops, graph.value_shape, self.slot_of
        where, rank, value, sid = self.where, self.rank, self.value, self.sid
        siblings, readers = self.siblings, self.readers
        special = _SPECIAL_SLOTS
        for op, (name, results) in enumerate(zip(graph.op_name, graph.op_results)):
            if not results or name in special:
                self._special_slots(op, name, results)
                continue
            attr = ops[op].attributes.get(SHARDING_ATTR)
            if attr is not None or len(results) != 1:
                self._per_value_attr_slots(op, SHARDING_ATTR, results, attr)
                continue
            # Most ops: one result, no sharding yet (``_new_slot`` inlined).
            result = results[0]
            slot = len(where)
            shape = shapes[result]
            where.append((PER_VALUE, op, SHARDING_ATTR, 0))
            rank.append(len(shape) if shape else 0)
            value.append(None)
            sid.append(0)
            siblings.append((slot,))
            readers.append([])
            slot_of[result] = slot

    def _special_slots(self, op: int, name: str, results: list[int]) -> None:
        """Slots of an op without results or with its own place for shardings."""
        graph = self.graph
        if name == "func.func":
            self._func_slots(op)
        elif name in _OWN_ATTR and results:
            attrs = graph.ops[op].attributes
            attr_name = _OWN_ATTR[name]
            sharding = self._parse(attrs[attr_name]) if attr_name in attrs else None
            self.slot_of[results[0]] = self._new_slot(
                (OWN, op, attr_name), graph.value_rank(results[0]), sharding)
        elif name == "sdy.named_computation":
            self._per_value_slots(op, "out_shardings", results)
            if graph.op_blocks[op]:
                self._per_value_slots(op, "in_shardings", graph.op_blocks[op][0][0])
        elif name == MANUAL_OP:
            self._manual_slots(op)
        elif results:
            self._per_value_slots(op, SHARDING_ATTR, results)

    def _manual_slots(self, op: int) -> None:
        graph = self.graph
        attrs = graph.ops[op].attributes
        manual = manual_axes_of(graph.ops[op])
        ins = parse_per_value(str(attrs["in_shardings"]), self.meshes)
        outs = parse_per_value(str(attrs["out_shardings"]), self.meshes)
        self.manual[op] = (manual, ins, outs)
        self._per_value_slots(op, "out_shardings", graph.op_results[op])
        slots = []
        if graph.op_blocks[op]:
            for k, value in enumerate(graph.op_blocks[op][0][0]):
                inner = erase_manual_axes(ins[k], manual) if k < len(ins) else None
                self.slot_of[value] = self._new_slot(
                    (MANUAL_IN, op, "in_shardings", k), graph.value_rank(value), inner)
                slots.append(self.slot_of[value])
        self.manual_in_slots[op] = slots

    # ------------------------------------------------------------------ edges
    def _terminator_operand(self, op: int, block: int, index: int) -> int:
        graph = self.graph
        ops = graph.op_blocks[op][block][1]
        return graph.op_operands[ops[-1]][index]

    def _assign_edges(self) -> None:
        graph = self.graph
        for edge, name in enumerate(graph.op_name):
            if name != EDGE_OP:
                continue
            owner_value = graph.op_operands[edge][0]
            owner = graph.value_owner[owner_value]
            index = graph.value_arg_index[owner_value]
            owner_name = graph.op_name[owner]
            sources: list[int] = []
            targets: list[int] = []
            flow = DATA_FLOW_OPS[owner_name]
            blocks = graph.op_blocks[owner]
            if graph.value_def[owner_value] == -1:  # block argument owner
                sources = [graph.op_operands[owner][index]]
            else:
                regions = flow.returning_regions
                if regions is None:
                    regions = range(len(blocks))
                sources = [graph.op_operands[owner][index]] if flow.results_from_operands else []
                sources += [self._terminator_operand(owner, r, index) for r in regions]
                if flow.block_args_are_results:
                    targets = [block[0][index] for block in blocks]
            if owner_name == MANUAL_OP and owner in self.manual:
                manual, ins, outs = self.manual[owner]
                is_arg = graph.value_def[owner_value] == -1
                outer = (ins if is_arg else outs)
                self.edge_view[edge] = (manual, outer[index] if index < len(outer) else None,
                                        is_arg)
            edge_result = graph.op_results[edge][0]
            for value in (owner_value, *targets):
                self.storage[value] = edge_result
                self.slot_of[value] = self.slot_of[edge_result]
            self.edge_sources[edge] = sources
            self.edge_targets[edge] = targets

    def edge_before(self, edge: int, sharding: TensorSharding | None) -> TensorSharding | None:
        """The edge's sharding as its sources see it (for a manual computation, without its manual axes)."""
        view = self.edge_view.get(edge)
        if view is None:
            return sharding
        manual, outer, is_arg = view
        if is_arg:
            return add_free_axes(outer, sharding, manual)
        return erase_manual_axes(sharding, manual)

    def edge_after(self, edge: int, sharding: TensorSharding) -> TensorSharding:
        """A sharding computed in the sources' view, as the edge stores it."""
        view = self.edge_view.get(edge)
        if view is None:
            return sharding
        manual, outer, is_arg = view
        if is_arg:
            return erase_manual_axes(sharding, manual)
        return add_free_axes(outer, sharding, manual)

    def edge_of_value(self, value: int) -> int:
        """The ``sdy.data_flow_edge`` whose input is ``value`` (its only use), or -1."""
        uses = self.graph.uses[value]
        if len(uses) == 1 and self.graph.op_name[uses[0][0]] == EDGE_OP:
            return uses[0][0]
        return -1

    # ------------------------------------------------------------------ access
    def get(self, value: int) -> TensorSharding | None:
        """The current sharding of ``value`` (None when absent or not shardable)."""
        slot = self.slot_of[value]
        return self.value[slot] if slot >= 0 else None

    def set_slot(self, slot: int, sharding: TensorSharding) -> None:
        """Store ``sharding``; siblings without a sharding get open placeholders."""
        self.set_interned(slot, sharding, self.intern(sharding))

    def set_interned(self, slot: int, sharding: TensorSharding, sid: int) -> None:
        """``set_slot`` with ``sid``, the interned id of ``sharding``, already known."""
        self.value[slot] = sharding
        self.sid[slot] = sid
        self.dirty.add(slot)
        log = self.log
        if log is not None:
            log.append((slot, sharding, sid, True))
        settled = self.settled
        for op in self.readers[slot]:
            settled[op] = -1
        for sibling in self.siblings[slot]:
            if self.value[sibling] is None:
                placeholder = open_sharding(sharding.mesh, self.rank[sibling])
                self.value[sibling] = placeholder
                self.sid[sibling] = self.intern(placeholder)
                self.dirty.add(sibling)
                if log is not None:
                    log.append((sibling, placeholder, self.sid[sibling], False))
                for op in self.readers[sibling]:
                    settled[op] = -1

    # ------------------------------------------------------------------ write back
    def _attr(self, text: str) -> ir.Attribute:
        attr = self._attr_cache.get(text)
        if attr is None:
            attr = ir.Attribute.parse(text, self.graph.module.context)
            self._attr_cache[text] = attr
        return attr

    def write_back(self, *, keep_rules: bool) -> None:
        """Apply shardings, erasures and rule attributes to the IR."""
        graph = self.graph
        func_lists: dict[tuple[int, str], dict[int, TensorSharding]] = {}
        per_value: dict[tuple[int, str], int] = {}
        manual_ins: set[int] = set()
        for slot in sorted(self.dirty):
            kind, op = self.where[slot][0], self.where[slot][1]
            if graph.erased[op]:
                continue
            if kind in (ARG, RES):
                key = (op, "arg_attrs" if kind == ARG else "res_attrs")
                func_lists.setdefault(key, {})[self.where[slot][2]] = self.value[slot]
            elif kind == MANUAL_IN:
                manual_ins.add(op)
            elif kind == OWN:
                graph.ops[op].attributes[self.where[slot][2]] = self._attr(
                    format_sharding(self.value[slot]))
            else:
                per_value[(op, self.where[slot][2])] = slot
        formatted: dict[tuple[int, ...], ir.Attribute] = {}
        sid_of = self.sid.__getitem__
        for (op, attr_name), slot in per_value.items():
            slots = self.siblings[slot]
            sids = tuple(map(sid_of, slots))
            attr = formatted.get(sids)
            if attr is None:
                attr = formatted[sids] = self._attr(
                    format_per_value([self.value[s] for s in slots]))
            graph.ops[op].attributes[attr_name] = attr
            if attr_name == SHARDING_ATTR:
                self.sharding_attrs[op] = attr
        for op in sorted(manual_ins):
            self._write_manual_ins(op)
        for (op, list_name), updates in func_lists.items():
            self._write_func_list(op, list_name, updates)
        self._write_rules(keep_rules)
        self._erase_ops()

    def _write_manual_ins(self, op: int) -> None:
        # Shardy rewrites every in-sharding when one body argument changes.
        manual, ins, _ = self.manual[op]
        slots = self.manual_in_slots[op]
        new = [add_free_axes(ins[k], self.value[slot], manual) for k, slot in enumerate(slots)]
        self.graph.ops[op].attributes["in_shardings"] = self._attr(format_per_value(new))

    def _write_func_list(self, op: int, list_name: str, updates: dict[int, TensorSharding]) -> None:
        func = self.graph.ops[op]
        if list_name == "arg_attrs":
            count = len(self.graph.op_blocks[op][0][0])
        else:
            count = len(self.func_results[op])
        old = list(ir.ArrayAttr(func.attributes[list_name])) if list_name in func.attributes else []
        new = []
        for k in range(count):
            entries = _dict_entries(old[k]) if k < len(old) else {}
            if k in updates:
                attr = entries[SHARDING_ATTR] = self._attr(format_sharding(updates[k]))
                self._written[hash(attr)] = updates[k]
            new.append(ir.DictAttr.get(entries, context=func.context))
        func.attributes[list_name] = ir.ArrayAttr.get(new, context=func.context)

    def _write_rules(self, keep_rules: bool) -> None:
        graph = self.graph
        if keep_rules:
            # Building an attribute costs many binding calls: one per rule, reused
            # by every op (and every graph of the memo) with that rule.
            built = graph.memo.rule_attributes
            for op, rule in graph.visited_rules().items():
                if rule is not None and rule.rule is not None and not graph.erased[op]:
                    attrs = graph.ops[op].attributes
                    if SHARDING_RULE_ATTR not in attrs:
                        entry = built.get(id(rule.rule))
                        if entry is None:
                            entry = built[id(rule.rule)] = (
                                rule.rule, rule.rule.to_attr(graph.module.context))
                        attrs[SHARDING_RULE_ATTR] = entry[1]
            return
        for op, ir_op in enumerate(graph.ops):
            if graph.erased[op]:
                continue
            attrs = ir_op.attributes
            if SHARDING_RULE_ATTR in attrs and not sdy.OpShardingRuleAttr(attrs[SHARDING_RULE_ATTR]).is_custom:
                del attrs[SHARDING_RULE_ATTR]

    def _erase_ops(self) -> None:
        graph = self.graph
        for op in self.erase_log:
            parent = graph.op_parent[op]
            if parent >= 0 and graph.erased[parent]:
                continue
            graph.ops[op].erase()
