"""Shapes, element sizes and shardings of every value of a module, read once.

``ModuleValues`` wraps the propagation engine's compact graph and sharding
store (``shardc.compiler.propagation``), so the cost model and the checks
read shardings exactly where propagation writes them (function arguments and
results, per-value op attributes, sdy op attributes, data-flow edges, manual
computations). Values are graph indices.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from itertools import compress, count
from operator import ne

from jaxlib.mlir import ir

from shardc.compiler.propagation import Propagation, SharedRead, propagate_read
from shardc.compiler.propagation.graph import PropagationGraph, ReadMemo
from shardc.compiler.propagation.ir_access import ShardingStore
from shardc.compiler.sharding.rule import OpShardingRule
from shardc.compiler.sharding.rules import rule_for
from shardc.compiler.sharding.tensor import DimSharding, MeshInfo, Tensor, TensorSharding
from shardc.dialects.sdy import SHARDING_RULE_ATTR


def element_bytes(type_: ir.Type) -> int:
    """Bytes of one element of a tensor type (at least 1; i1 counts as a byte)."""
    element = ir.ShapedType(type_).element_type
    if isinstance(element, ir.ComplexType):
        inner = element.element_type
        return 2 * max(1, getattr(inner, "width", 32) // 8)
    width = getattr(element, "width", None)
    return max(1, width // 8) if isinstance(width, int) else 4


_UNREAD = object()


@functools.cache  # a few (mesh, rank) pairs, asked for every value without a sharding
def replicated(mesh: str, rank: int) -> TensorSharding:
    """The closed, fully replicated sharding of a rank-``rank`` tensor."""
    return TensorSharding(mesh, (DimSharding((), True),) * rank)


class CostMemo:
    """What the cost model finds again in every propagated copy of one module.

    Its readers read their copies with one ``graph.ReadMemo`` (``reads``), whose
    interned sharding ids (``ShardingStore.sid``) mean the same in every copy,
    so ``ModuleValues.op_key`` names an op's situation with small ints;
    (its op part, the same in every copy, interned in ``ops``);
    ``found`` maps such a key to what the cost model found there
    (``cost.report``; ``bytes``, to its bytes where they are all it is),
    ``conflicts`` to the bytes of the collectives the op
    itself needs (``cost_aware.candidates.conflict_points``); ``sizes`` maps
    a (type, sharding) pair to its shard's bytes (``cost_aware.pricing.memory_peak``).
    Like ``graph.ReadMemo`` it holds for one context and one set of meshes:
    the copies one cost-aware search propagates.
    """

    def __init__(self, reads: ReadMemo) -> None:
        self.reads = reads
        self.found: dict[tuple, object] = {}
        # such a key -> the op's bytes, where what it needs reshards no operand (no
        # reuse of an earlier reshard to ask about): most ops (``cost.report``)
        self.bytes: dict[tuple, int] = {}
        # (type, sharding id, declared result's sharding id, mesh) -> the bytes of
        # returning such a value as such a result (``cost.report``)
        self.returns: dict[tuple, int] = {}
        # (mesh, rank) -> ``sharding_id`` of a value the store holds no sharding for
        self.unsharded: dict[tuple, int] = {}
        self.conflicts: dict[tuple, int] = {}
        self.sizes: dict[tuple[int, int], int] = {}
        # (name, attached rule, operand types, result types) -> its int in ``op_key``s
        self.ops: dict[tuple, int] = {}
        # sharding id -> its dimension axes (``ModuleValues.axes``)
        self.axes: dict[int, tuple | None] = {}


class ModuleValues:
    """The values of one module: shape, element size and sharding by graph index.

    With ``missing_as_replicated`` a value that carries no sharding reads as
    replicated on the module's first mesh (what XLA assumes once propagation
    is over); otherwise it reads as None (unknown).
    """

    def __init__(self, module: ir.Operation, *, missing_as_replicated: bool = False,
                 read: tuple[PropagationGraph, ShardingStore] | None = None,
                 costs: CostMemo | None = None):
        if read is None:
            graph = PropagationGraph(module, memo=costs.reads if costs is not None else None)
            read = graph, ShardingStore(graph)
        self.graph, self.store = read
        self.meshes: dict[str, MeshInfo] = self.store.meshes
        self.mesh = next(iter(self.meshes), None) if missing_as_replicated else None
        # XLA reshards a value to a given sharding once and reuses it (reshard cache):
        # (value, target, device groups resharded in: ``OpCommunication.groups``) ->
        # where its first reshard is (``cost.heights``), or None.
        self.resharded: dict[tuple[int, tuple, tuple], tuple | None] = {}
        # Block -> its ops' heights as XLA's all-gather CSE measures them (``cost.heights``),
        # which depend on the shardings (the all-reduces of partial sums count).
        self.heights: dict[tuple[int, int], dict[int, int]] = {}
        # (element bytes, element type) per uniqued type: the cost model asks per use.
        self._elements: dict[int, tuple[int, str]] = {}
        # Each value as a Tensor: the cost model asks per use, and a module is read
        # once (its shardings never change under a reader).
        self._tensors: dict[int, Tensor | None] = {}
        self._ids: dict[int, int] = {}  # ``sharding_id`` of values the store holds no sharding for
        # What the cost model kept of this copy's price, by part (its bytes by op,
        # ``cost.report.BytesByOp``; its live sizes, ``cost_aware.pricing.LiveSizes``),
        # where priced from scratch with ``costs``; and another copy's of the same read,
        # set by the caller, from which this one is priced again only where it differs.
        self.priced: dict[str, object] = {}
        self.priced_from: dict[str, object] | None = None
        self.costs = costs
        # What the cost model derives from the module by op and keeps, from its IR, its
        # graph and where its store keeps shardings (attached rules, the search's op
        # numbers, slots), none of which propagation changes: shared by the readers of
        # one ``SharedRead``'s propagations.
        self.facts: dict = {}
        self._unwritten = False  # ``propagated(write=False)`` left the module as it was
        # ``propagated_on``'s: makes the copy its propagation stands for.
        self._copy: Callable[[], ir.Operation] | None = None
        self.funcs = {
            ir.StringAttr(self.graph.ops[op].attributes["sym_name"]).value: op
            for op, name in enumerate(self.graph.op_name) if name == "func.func"
        }

    @classmethod
    def propagated(cls, module: ir.Operation, *, plan: str, conservative: bool,
                   missing_as_replicated: bool = False,
                   costs: CostMemo | None = None, write: bool = True) -> ModuleValues:
        """Propagate ``module`` in place (keeping the rules it used), then read it.

        The propagation's own graph and store are read (``propagate_read``)
        unless they differ from the module's: where it erased ops, or where a
        manual computation's in-shardings may have been rewritten. ``costs``:
        the reader's (``CostMemo``), whose ``reads`` the propagation reads with.

        ``write=False``, for a module that is read through the reader (priced,
        then mostly dropped): the shardings stay in the store, the module keeps
        its own until ``write_back``. It is still written where the module is
        read again (above) or where the propagation used a rule the module does
        not carry (the cost model reads each op's rule from the module).
        """
        graph, store = propagate_read(module, plan=plan, conservative=conservative,
                                      keep_sharding_rules=True,
                                      memo=costs.reads if costs is not None else None,
                                      write=write)
        again = any(graph.erased) or bool(store.manual)
        if not write and (again or graph.rules_to_attach()):
            store.write_back(keep_rules=True)
            write = True
        if again:
            return cls(module, missing_as_replicated=missing_as_replicated, costs=costs)
        reader = cls(module, missing_as_replicated=missing_as_replicated, read=(graph, store),
                     costs=costs)
        reader._unwritten = not write
        return reader

    @classmethod
    def propagated_on(cls, read: SharedRead, starts: dict[int, ir.Attribute],
                      copy: Callable[[], ir.Operation], *, plan: str,
                      unsharded: tuple[frozenset[int], frozenset[int]] = (frozenset(),
                                                                          frozenset()),
                      missing_as_replicated: bool = False,
                      costs: CostMemo | None = None, base: Propagation | None = None
                      ) -> ModuleValues | None:
        """``propagated(copy(), write=False)`` without the copy: ``copy`` makes a copy of
        ``read``'s module that differs from it only in the ``sdy.sharding`` of the ops
        of ``starts`` and in the function arguments and results of ``unsharded``
        (``SharedRead.propagate``), and is called only by ``write_back``,
        which then reads that copy's graph and writes the store to it.

        None where the shared read cannot stand for the copy (``SharedRead.usable``,
        a start it cannot apply, or a rule the copy would be written to carry, which
        the cost model would read from it): propagate the copy instead. With ``base``
        (a recorded propagation of ``read`` with ``plan``) the store is re-propagated
        from it (``Propagation.repropagate``).
        """
        if not read.usable:
            return None
        store = (base.repropagate(starts, unsharded) if base is not None
                 else read.propagate(plan, starts, unsharded))
        if store is None or read.rules_to_attach():
            return None
        reader = cls(read.graph.module, missing_as_replicated=missing_as_replicated,
                     read=(read.graph, store), costs=costs)
        reader._unwritten = True
        reader._copy = copy
        reader.facts = read.facts
        return reader

    def write_back(self) -> None:
        """Write the propagation ``propagated(write=False)`` kept in the store to the
        module (once; nothing when it was written). A ``propagated_on`` reader reads the
        copy it stands for first, and reads it from then on."""
        if self._unwritten:
            self._unwritten = False
            if self._copy is not None:
                # A copy of the read's module: its graph but for the bindings.
                graph = PropagationGraph.of_clone(self._copy(), self.graph,
                                                  conservative=self.graph.conservative,
                                                  memo=self.graph.memo)
                self._copy = None
                self.store.moved_to(graph)
                self.graph = graph
                self.facts = {}
            self.store.write_back(keep_rules=True)

    def mesh_of(self, *shardings: TensorSharding | None) -> MeshInfo | None:
        """The ``sdy.mesh`` of the first sharding given, for the reshard cost model.

        ``reshard_collectives(..., mesh=)`` needs it to order the devices the
        way XLA does (every mesh axis, in mesh order). None when no sharding
        is given, the mesh is unknown or has no axes, or a sharding names an
        axis the mesh lacks; the model then orders the axes the shardings name.
        """
        first = next((s for s in shardings if s is not None), None)
        if first is None:
            return None
        mesh = self.meshes.get(first.mesh)
        if mesh is None or not mesh.sizes:
            return None
        sizes = mesh.sizes
        for sharding in shardings:
            if sharding is None:
                continue
            if sharding.mesh != first.mesh and self.meshes.get(sharding.mesh) != mesh:
                return None
            for dim in sharding.dims:
                for axis in dim.axes:  # plain loops: the cost model asks once per op
                    if axis.name not in sizes:
                        return None
        return mesh

    def sharding(self, value: int) -> TensorSharding | None:
        """The value's sharding (see the class docstring for missing ones)."""
        sharding = self.store.get(value)
        graph = self.graph
        if sharding is None and graph.value_def[value] == -1:
            owner = graph.value_owner[value]
            if graph.op_name[owner] == "stablehlo.while":
                # After the edges are sunk, the loop's per-value sharding is also
                # that of its body and condition arguments.
                sharding = self.store.get(graph.op_results[owner][graph.value_arg_index[value]])
        if sharding is None and self.mesh is not None:
            return replicated(self.mesh, self.graph.value_rank(value))
        return sharding

    def reads_loop_result(self, value: int) -> bool:
        """Whether ``value`` is an argument of a loop's body or condition, whose sharding
        ``sharding`` reads from the loop's result where the store holds none for it."""
        graph = self.graph
        return (graph.value_def[value] == -1
                and graph.op_name[graph.value_owner[value]] == "stablehlo.while")

    def changed_slots(self, sid: list[int]) -> Iterator[int]:
        """The store slots whose sharding id differs from ``sid``'s (the ids of another
        store of the same layout: ``ShardingStore.sid``)."""
        return compress(count(), map(ne, self.store.sid, sid))

    def tensor(self, value: int) -> Tensor | None:
        """The value as the cost model sees it; None for non-static or non-tensor values."""
        try:
            return self._tensors[value]
        except KeyError:
            tensor = self._tensors[value] = self._read_tensor(value)
            return tensor

    def _read_tensor(self, value: int) -> Tensor | None:
        shape = self.graph.value_shape[value]
        if shape is None:
            return None
        key = self.graph.value_type_key[value]
        element = self._elements.get(key)
        if element is None:
            type_ = self.graph.values[value].type
            element = self._elements[key] = (element_bytes(type_),
                                             str(ir.ShapedType(type_).element_type))
        return Tensor(shape, element[0], self.sharding(value), element[1])

    def rule_tensors(self, op: int) -> tuple[OpShardingRule, list[Tensor], list[Tensor]] | None:
        """The op's sharding rule with its operand and result tensors.

        None when the op has no rule or one of its operands or results is not
        a static tensor, since the cost model can then say nothing about it.
        """
        graph = self.graph
        # The graph's rule is ``rule_for``'s, found by uniqued types and attributes rather
        # than printed ones, and kept per op (unless the graph's rules are conservative).
        compact = None if graph.conservative else graph.rule(op)
        if compact is not None and compact.rule is not None:
            rule = compact.rule
        elif compact is None and not graph.conservative:
            return None
        else:
            rule = rule_for(graph.ops[op])
        if rule is None:
            return None
        operands = [self.tensor(v) for v in self.graph.op_operands[op]]
        results = [self.tensor(v) for v in self.graph.op_results[op]]
        if any(t is None for t in operands + results):
            return None
        return rule, operands, results

    def op_key(self, op: int) -> tuple | None:
        """What decides the collectives op ``op``'s rule needs, as ``costs`` names it.

        Its name, attached rule (uniqued: its hash names it), the type of every
        operand and result (these four interned as one int, ``CostMemo.ops``), then
        the sharding of every operand and result: what ``rule_tensors`` reads, so
        equal keys give equal answers. None without ``costs`` or an attached rule.
        """
        if self.costs is None:
            return None
        part = self.op_key_part(op)
        return None if part[0] is None else self.key_of_part(part)

    def op_keys(self) -> list[tuple | None]:
        """``op_key`` of every op with results (None for the others), as one pass: a
        pricing asks for every op's, and three calls per op were most of its cost on a
        small module."""
        if self.costs is None:
            return [None] * len(self.graph.ops)
        parts = self.facts.get("op key parts")
        if parts is None:
            results = self.graph.op_results
            parts = self.facts["op key parts"] = [
                self.op_key_part(op) if results[op] else None for op in range(len(results))]
        return [None if part is None or part[0] is None else self.key_of_part(part)
                for part in parts]

    def key_of_part(self, part: tuple[int, tuple[int, ...], tuple[int, ...]]) -> tuple:
        """``op_key`` of the op whose ``op_key_part`` is ``part`` (one with a key)."""
        head, values, slots = part
        sid = self.store.sid
        ids = [sid[slot] for slot in slots]
        if 0 in ids:  # not in the store: ``sharding_id`` knows
            ids = [found or self.sharding_id(value) for found, value in zip(ids, values)]
        return (head, *ids)

    def op_key_part(self, op: int) -> tuple[int | None, tuple[int, ...], tuple[int, ...]]:
        """The part of ``op_key(op)`` that no propagation changes: the interned int of
        the op's name, rule and types (None: the op has no key), its operands and
        results, and their store slots; the same in every reader of these ``facts``,
        whose stores share where shardings live. Only with ``costs``."""
        parts = self.facts.get("op keys")
        if parts is None:
            parts = self.facts["op keys"] = {}
        part = parts.get(op)
        if part is None:
            graph = self.graph
            attributes = graph.ops[op].attributes
            if SHARDING_RULE_ATTR in attributes:
                types = graph.value_type_key
                operands, results = graph.op_operands[op], graph.op_results[op]
                head = (graph.op_name[op], hash(attributes[SHARDING_RULE_ATTR]),
                        tuple([types[v] for v in operands]), tuple([types[v] for v in results]))
                values = (*operands, *results)
                costs = self.costs
                part = parts[op] = (costs.ops.setdefault(head, len(costs.ops)), values,
                                    tuple([self.store.read_slot[v] for v in values]))
            else:
                part = parts[op] = (None, (), ())
        return part

    def sharding_id(self, value: int) -> int:
        """The interned int of ``sharding(value)`` (0 for None): equal for equal
        shardings in every reader of one ``CostMemo``, whose stores share the
        ``ReadMemo`` that interns them. Only with ``costs``."""
        store = self.store
        slot = store.slot_of[value]
        if slot >= 0:
            sid = store.sid[slot]
            if sid:  # the store holds it: ``sharding(value)`` is ``store.value[slot]``
                return sid
        # Not in the store (a replicated value, say): asked again for every user.
        sid = self._ids.get(value)
        if sid is None:
            graph = self.graph
            if self.costs is None or self.reads_loop_result(value):
                sid = store.intern(self.sharding(value))
            else:
                # Neither the store nor a loop gives it one: ``sharding`` is replicated
                # on ``mesh`` (or None), the same for every value of its rank in every copy.
                key = (self.mesh, graph.value_rank(value))
                sid = self.costs.unsharded.get(key)
                if sid is None:
                    sid = self.costs.unsharded[key] = store.intern(self.sharding(value))
            self._ids[value] = sid
        return sid

    def axes(self, value: int) -> tuple | None:
        """The dimension axes of ``sharding(value)`` (None without one), memoised by
        ``sharding_id`` with ``costs``."""
        if self.costs is None:
            sharding = self.sharding(value)
            return None if sharding is None else tuple([d.axes for d in sharding.dims])
        sid = self.sharding_id(value)
        axes = self.costs.axes.get(sid, _UNREAD)
        if axes is _UNREAD:
            sharding = self.sharding(value)
            axes = self.costs.axes[sid] = (None if sharding is None
                                           else tuple([d.axes for d in sharding.dims]))
        return axes
