"""The propagation driver: Shardy's worklist run, reproduced step for step.

One ``Driver.propagate`` call is one ``BasicPropagationPassImpl::propagate``:
a func-result step, one run of MLIR's greedy driver (top-down, one
iteration), and another func-result step. The worklist is a list plus a
position map: seeded in pre-order and reversed, popped LIFO, ``push`` never
moves an op already queued and also queues its ancestors. A popped op that
is trivially dead is erased (queueing producers left with at most one other
user); otherwise it gets one propagation *step*: read the shardings of its
operands and results, find the common mesh, project onto the rule's factors,
run the factor strategy, and write back each changed tensor, notifying its
producers and users in use-list order. What an op is comes from tables:
the rule registry (its factors), ``data_flow_ops`` (how values flow through
it) and ``PropagationGraph`` / ``ShardingStore``; the driver itself names only
the propagation barrier and the data-flow edge op.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

from jaxlib.mlir import ir

from shardc.compiler.diagnostics import PassError
from shardc.compiler.propagation.compact_rule import CompactRule, identity_rule
from shardc.compiler.propagation.data_flow_ops import DATA_FLOW_OPS
from shardc.compiler.propagation.directions import BOTH, NONE, DirectionFn
from shardc.compiler.propagation.factor_propagation import FactorPropagation
from shardc.compiler.propagation.graph import PropagationGraph
from shardc.compiler.propagation.ir_access import EDGE_OP, ShardingStore
from shardc.compiler.propagation.origins import factor_axes, factor_edges
from shardc.compiler.propagation.projection import back_project, project
from shardc.compiler.sharding.tensor import MeshInfo, TensorSharding

_BARRIER = "sdy.propagation_barrier"
# ``ShardingStore.settled`` of an op whose tensors have no sharding at all: its
# step writes nothing under any directions (there is no mesh to project on).
_UNSHARDED = -2


class Plan(NamedTuple):
    """What a step of one op reads, computed on the op's first visit."""

    key: int  # names everything but the shardings and directions a step depends on
    values: tuple[int, ...]  # the operands, then the results
    n_operands: int
    slots: tuple[int, ...]  # the store slots of ``values`` (the none-slot for values without)
    rule: CompactRule
    conservative: bool
    elementwise: bool
    edge: int  # the data-flow edge op whose sources are the operands, or -1
    fixed: int | None  # a propagation barrier's direction (None elsewhere)


class Driver:
    """Runs propagation steps over a graph and its sharding store."""

    def __init__(self, graph: PropagationGraph, store: ShardingStore,
                 groups: dict[int, list[int]] | None = None, *, after: Driver | None = None):
        """``after``: a ``reusable`` driver that ran on ``graph`` with a store of the
        same slots (``ShardingStore.fresh_copy``), whose plans, factor directions and
        slot readers this one reuses instead of computing them again: none of them
        depends on the shardings."""
        self.graph = graph
        self.store = store
        self.groups = groups or {}
        self.main_func = self._main_func() if after is None else after.main_func
        self.worklist: list[int | None] = []
        # op -> its index in the worklist, -1 when not queued.
        self.position: list[int] = [-1] * len(graph.ops)
        self.current = -1
        # Ops that a notification queues as themselves, neither a data-flow op
        # nor a terminator (most users: no ``_edge_for_use`` to ask).
        self._plain = [not terminator and name not in DATA_FLOW_OPS
                       for name, terminator in zip(graph.op_name, graph.op_terminator)
                       ] if after is None else after._plain
        # Ops that may be dead: no result used and not a terminator (the others are
        # not dead, and uses only go when an op is erased: ``erase`` adds to it).
        used = graph.uses.__getitem__
        self._unused = [not terminator and not any(map(used, results))
                        for terminator, results in zip(graph.op_terminator, graph.op_results)
                        ] if after is None else after._unused
        # A step is a pure function of its plan key (rule, flags, data-flow
        # view), its factor directions, the strategy and its tensors' shardings
        # (interned ids), so its updates are memoised on exactly those, with
        # the keys, in the graph's ``ReadMemo`` (shared by the drivers of
        # copies of one module): strategy -> (head, sids) -> updates.
        steps = graph.memo.steps
        self._memo: dict[FactorPropagation, dict[tuple, tuple]] = steps.updates
        self._plans: list[Plan | bool | None] = [None] * len(graph.ops)
        self._plan_keys: dict[tuple, int] = steps.plan_keys
        self._rules_alive: list[CompactRule] = steps.rules
        # direction function -> op -> head (cleared on erasures).
        self._dir_cache: dict[DirectionFn, dict[int, tuple]] = {}
        # chain -> the dir caches of its levels (cleared with ``_dir_cache``).
        self._chain_caches: dict = {}
        # (plan key, directions) -> head id, and head id -> directions.
        self._heads: dict[tuple, int] = steps.heads
        self._head_dirs: list[tuple] = steps.head_dirs
        # (chain, op signature, plan key) -> head per level.
        self._chain_memo: dict[tuple, list[int]] = steps.chains
        self.erasures = 0
        # The strategy under which ``store.settled`` was recorded.
        self._settled_by: FactorPropagation | None = None
        # Sharding-origin recorder (``origins.OriginRecorder``), None when off,
        # and its memo: strategy -> key -> (updates, factor edges).
        self.recorder = None
        # What the run did, step by step (``incremental.Recorder``), None when not recorded.
        self.trace = None
        self._origin_memo: dict[FactorPropagation, dict[tuple, tuple]] = {}
        # The func-result step, like an op step, is a pure function of the shape,
        # the strategy and the two shardings: strategy -> (shape, sids) -> updates.
        self._result_memo: dict[FactorPropagation, dict[tuple, tuple]] = steps.results
        if after is not None:
            # Complete plans are never written again, so they and the readers they
            # registered are shared; a cache entry added by a later run is as true
            # for every run on the graph.
            self._plans = after._plans
            store.readers = after.store.readers
            self._dir_cache = after._dir_cache
            self._chain_caches = after._chain_caches

    def reusable(self) -> bool:
        """Whether a later driver on this graph may reuse this one's plans (``after``):
        every op has its plan and nothing was erased (the graph is as it was read)."""
        return not self.erasures and None not in self._plans

    def _main_func(self) -> int:
        funcs = self.store.funcs
        top = [f for f in funcs if self.graph.op_parent[f] == -1]
        if len(top) == 1:
            return top[0]
        for f in top:
            if ir.StringAttr(self.graph.ops[f].attributes["sym_name"]).value == "main":
                return f
        if not top:
            return -1
        raise PassError(self.graph.module, "expected a single func or one named 'main'")

    # ------------------------------------------------------------------ run
    def propagate(self, strategy: FactorPropagation, direction: DirectionFn) -> None:
        """Func-result step, one worklist run, func-result step."""
        trace = self.trace
        if trace is not None:
            trace.phase("results", strategy)
        self.func_result_step(strategy)
        if trace is not None:
            trace.phase("stage", (strategy, direction))
        self.worklist_run(strategy, direction)
        if trace is not None:
            trace.phase("results", strategy)
        self.func_result_step(strategy)

    def worklist_run(self, strategy: FactorPropagation, direction: DirectionFn) -> None:
        """Visit every live op in pre-order, re-visiting ops as notifications queue them."""
        graph = self.graph
        erased = graph.erased
        position = self.position
        if self.erasures:
            self.worklist = [op for op in range(len(graph.ops) - 1, -1, -1) if not erased[op]]
            for i, op in enumerate(self.worklist):
                position[op] = i
        else:
            # Every op queued: op i sits at index n - 1 - i.
            self.worklist = list(range(len(graph.ops) - 1, -1, -1))
            position[:] = self.worklist
        worklist = self.worklist
        unused, is_dead = self._unused, graph.is_trivially_dead
        memo = self._memo.setdefault(strategy, {})
        plans, plan_for = self._plans, self._plan
        dir_cache = self._dir_cache.setdefault(direction, {})
        sid_of = self.store.sid.__getitem__
        head_dirs = self._head_dirs
        recorder = self.recorder
        origin_memo = self._origin_memo.setdefault(strategy, {})
        settled = self.store.settled
        trace = self.trace
        if strategy is not self._settled_by:
            # A step that wrote nothing under one strategy may write under
            # another (basic, then aggressive): settled steps are forgotten.
            settled[:] = [-1] * len(settled)
            self._settled_by = strategy
        while worklist:
            op = worklist.pop()
            if op is None:
                continue
            position[op] = -1
            if unused[op] and is_dead(op):
                self.erase(op)
                dir_cache = self._dir_cache.setdefault(direction, {})
                continue
            plan = plans[op]
            if plan is None:
                plan = plan_for(op)
            if plan is False:
                continue
            if trace is not None:
                trace.visit(op)
            done = settled[op]
            if done == _UNSHARDED:
                continue
            head = dir_cache.get(op)
            if done == head:
                continue
            sids = tuple(map(sid_of, plan.slots))
            if not any(sids):
                # Nothing to project onto: no step writes anything, under any
                # directions (not even computed until the op has a sharding).
                settled[op] = _UNSHARDED
                continue
            if head is None:
                head = self._factor_directions(op, plan, direction)
            key = (head, sids)
            if recorder is not None:
                # Origins need the step's factor edges too: memoised beside
                # the updates, on the same key.
                entry = origin_memo.get(key)
                if entry is None:
                    entry = origin_memo[key] = self._step(plan, head_dirs[head], strategy, True)
                    memo.setdefault(key, entry[0])
                updates = entry[0]
            else:
                updates = memo.get(key)
                if updates is None:
                    updates = memo[key] = self._step(plan, head_dirs[head], strategy)
            if updates:
                self.current = op
                values = plan.values
                for i, new, sid in updates:
                    self._update(values[i], new, sid, True)
                self.current = -1
                if recorder is not None:
                    recorder.step(values, entry[1])
            else:
                settled[op] = head

    def push(self, op: int) -> None:
        """Queue ``op`` and its ancestors (unless queued); never the op being visited."""
        if op == self.current:
            return
        parent = self.graph.op_parent
        position = self.position
        while op >= 0:
            if position[op] < 0:
                position[op] = len(self.worklist)
                self.worklist.append(op)
            op = parent[op]

    def _results_unused(self, op: int) -> bool:
        graph = self.graph
        if graph.op_terminator[op]:
            return False
        uses = graph.uses
        return not any(uses[value] for value in graph.op_results[op])

    def erase(self, op: int) -> None:
        """Erase a dead op (nested ops first), queueing producers as MLIR does."""
        graph = self.graph
        self.erasures += 1
        # Use counts (heuristic h0) may have changed: recompute directions.
        self._dir_cache.clear()
        self._chain_caches.clear()
        for dead in graph.erase_order(op):
            for value in graph.op_operands[dead]:
                producer = graph.value_def[value]
                if producer < 0:
                    continue
                other, more = -1, False
                for user, _ in graph.uses[value]:
                    if user == dead or user == other:
                        continue
                    if other < 0:
                        other = user
                        continue
                    more = True
                    break
                if not more:
                    self.push(producer)
            index = self.position[dead]
            if index >= 0:
                self.worklist[index] = None
                self.position[dead] = -1
            graph.drop_uses_of(dead)
            self.store.erase_log.append(dead)
            for value in graph.op_operands[dead]:
                producer = graph.value_def[value]
                if producer >= 0 and not self._unused[producer]:
                    self._unused[producer] = self._results_unused(producer)

    # ------------------------------------------------------------------ visiting
    def _plan(self, op: int) -> Plan | bool:
        """The ``Plan`` of ``op``, computed on its first visit (False: no step)."""
        graph, store = self.graph, self.store
        name = graph.op_name[op]
        plan = False
        if name == _BARRIER:
            value = graph.op_results[op][0]
            shape = graph.value_shape[value]
            if shape is not None:
                fixed = ir.IntegerAttr(graph.ops[op].attributes["allowed_direction"]).value
                plan = self._make_plan(op, graph.op_operands[op], [value], identity_rule(shape),
                                       False, -1, fixed)
        elif name == EDGE_OP:
            value = graph.op_results[op][0]
            shape = graph.value_shape[value]
            sources = store.edge_sources.get(op, [])
            if shape is not None and sources:
                plan = self._make_plan(op, sources, [value], identity_rule(shape, len(sources)),
                                       False, op if op in store.edge_view else -1, None)
        else:
            rule = graph.rule(op)
            if rule is not None:
                plan = self._make_plan(op, graph.op_operands[op], graph.op_results[op], rule,
                                       graph.conservative, -1, None)
        self._plans[op] = plan
        return plan

    def _make_plan(self, op: int, operands: list[int], results: list[int], rule: CompactRule,
                   conservative: bool, edge: int, fixed: int | None) -> Plan:
        store = self.store
        values = (*operands, *results)
        read_slot, readers = store.read_slot, store.readers
        slots = tuple(map(read_slot.__getitem__, values))
        for slot in slots:  # a slot read twice lists op twice: resetting it twice is harmless
            readers[slot].append(op)
        elementwise = edge < 0 and fixed is None and self.graph.is_elementwise(op)
        # An edge's step depends on its view (``edge_before``/``edge_after``), not
        # on which op it is: keys stay meaningful in other graphs of the memo.
        view = store.edge_view[edge] if edge >= 0 else None
        signature = (id(rule), conservative, elementwise, view, len(operands))
        key = self._plan_keys.get(signature)
        if key is None:
            key = self._plan_keys[signature] = len(self._plan_keys)
            self._rules_alive.append(rule)
        return Plan(key, values, len(operands), slots, rule, conservative, elementwise, edge, fixed)

    def common_mesh(self, shardings: list[TensorSharding | None]) -> MeshInfo | None:
        """The first non-empty mesh, if every other non-empty mesh equals it."""
        meshes = self.store.meshes
        first = None
        for sharding in shardings:
            if sharding is None:
                continue
            info = meshes.get(sharding.mesh)
            if info is None:
                return None
            if info.empty:
                continue
            if first is None:
                first = info
            elif info.key != first.key:
                return None
        if first is None or first.maximal:
            return None
        return first

    def _head(self, plan: Plan, directions: tuple) -> int:
        """The int naming (plan key, directions): the memo key's first half."""
        pair = (plan.key, directions)
        head = self._heads.get(pair)
        if head is None:
            head = self._heads[pair] = len(self._head_dirs)
            self._head_dirs.append(directions)
        return head

    def _factor_directions(self, op: int, plan: Plan, direction: DirectionFn) -> int:
        """The head (plan key and factor directions) of ``op`` under ``direction``.

        Cached per direction function; for a level of a ``DirectionChain``
        every level is computed (and cached) at once.
        """
        rule, fixed = plan.rule, plan.fixed
        factors = range(len(rule.factor_sizes))
        if fixed is not None:
            out = self._head(plan, (fixed,) * len(factors))
            self._dir_cache.setdefault(direction, {})[op] = out
            return out
        graph, blocked = self.graph, rule.blocked
        chain = getattr(direction, "chain", None)
        if chain is not None:
            heads = None
            if chain.signature is not None:
                memo_key = (chain, chain.signature(graph, op), plan.key)
                heads = self._chain_memo.get(memo_key)
            if heads is None:
                heads = []
                for level in chain.for_op(graph, op, len(factors)):
                    if blocked:
                        level = [NONE if f in blocked else d for f, d in enumerate(level)]
                    heads.append(self._head(plan, tuple(level)))
                if chain.signature is not None:
                    self._chain_memo[memo_key] = heads
            caches = self._chain_caches.get(chain)
            if caches is None:
                dir_cache = self._dir_cache
                caches = self._chain_caches[chain] = [
                    dir_cache.setdefault(function, {}) for function in chain.functions]
            for cache, head in zip(caches, heads):
                cache[op] = head
            return heads[direction.level]
        out = self._head(plan, self._uncached_directions(op, rule, direction))
        self._dir_cache.setdefault(direction, {})[op] = out
        return out

    def _uncached_directions(self, op: int, rule: CompactRule, direction: DirectionFn) -> tuple:
        graph, blocked = self.graph, rule.blocked
        factors = range(len(rule.factor_sizes))
        for_factors = getattr(direction, "for_factors", None)
        if for_factors is not None:
            raw = for_factors(graph, op, factors)
            return tuple(NONE if f in blocked else raw[f] for f in factors)
        return tuple(NONE if f in blocked else direction(graph, op, f) for f in factors)

    def _step(self, plan: Plan, directions: tuple, strategy: FactorPropagation,
              edges: bool = False) -> tuple:
        """One step as a pure function: the ``(value index, new sharding, its id)`` updates.

        The result depends only on the plan's key, the directions, the
        strategy and the shardings of the plan's slots, which is what the
        caller memoises it on.
        """
        values, n, rule, edge = plan.values, plan.n_operands, plan.rule, plan.edge
        conservative, elementwise = plan.conservative, plan.elementwise
        store = self.store
        shardings = list(map(store.value.__getitem__, plan.slots))
        if edge >= 0:
            shardings[-1] = store.edge_before(edge, shardings[-1])
        mesh = self.common_mesh(shardings)
        if mesh is None:
            return ((), ()) if edges else ()
        sizes = rule.factor_sizes
        mappings = rule.operand_mappings + rule.result_mappings
        projections = [project(s, m, sizes) for s, m in zip(shardings, mappings)]
        before = factor_axes(projections) if edges else None
        flags_o, flags_r = strategy(projections[:n], projections[n:], sizes,
                                    directions.__getitem__, conservative=conservative,
                                    elementwise=elementwise)
        updates = []
        for i, flag in enumerate(flags_o + flags_r):
            if not flag:
                continue
            new = back_project(projections[i], mappings[i], sizes, mesh.name)
            old = shardings[i]
            if (old is None and new.has_no_axes()) or new == old:
                continue
            if edge >= 0 and i == len(values) - 1:
                new = store.edge_after(edge, new)
            # Interned once here, not on every replay of the memoised step.
            updates.append((i, new, store.intern(new)))
        if edges:
            return tuple(updates), factor_edges(before, projections, mappings, n)
        return tuple(updates)

    def update(self, value: int, sharding: TensorSharding, notify: bool) -> None:
        """Store ``sharding`` for ``value`` (and its group), notifying if asked."""
        self._update(value, sharding, self.store.intern(sharding), notify)

    def _update(self, value: int, sharding: TensorSharding, sid: int, notify: bool) -> None:
        """``update`` with ``sharding``'s interned id already known."""
        store = self.store
        storage = store.storage[value]
        slot = store.slot_of[storage]
        if slot < 0:
            return
        store.set_interned(slot, sharding, sid)
        if notify:
            self.notify(storage)
        for member in self.groups.get(storage, ()):
            if member == storage:
                continue
            member_slot = store.slot_of[store.storage[member]]
            if member_slot >= 0:
                store.set_interned(member_slot, sharding, sid)
            if notify:
                self.notify(member)

    # ------------------------------------------------------------------ notifications
    def notify(self, value: int) -> None:
        """Queue everything affected by a change of ``value``'s sharding."""
        graph = self.graph
        producer = graph.value_def[value]
        if producer >= 0 and graph.op_name[producer] == EDGE_OP:
            for target in self.store.edge_targets.get(producer, ()):
                self.notify_users(target)
        self.push(producer if producer >= 0 else graph.value_owner[value])
        self.notify_users(value)

    def notify_users(self, value: int) -> None:
        """Queue the users of ``value`` (edges for edge sources, parents for terminators)."""
        graph, plain = self.graph, self._plain
        position, parent, worklist = self.position, graph.op_parent, self.worklist
        for user, index in graph.uses[value]:
            if plain[user]:
                # ``push`` inlined: most notifications queue plain users.
                if user == self.current:
                    continue
                while user >= 0:
                    if position[user] < 0:
                        position[user] = len(worklist)
                        worklist.append(user)
                    user = parent[user]
                continue
            edge = self._edge_for_use(user, index)
            if edge >= 0:
                self.push(edge)
            elif graph.op_terminator[user]:
                self.push(graph.op_parent[user])
            else:
                self.push(user)

    def _edge_for_use(self, user: int, index: int) -> int:
        """The data-flow edge that operand ``index`` of ``user`` flows into (-1: none)."""
        graph, store = self.graph, self.store
        flow = DATA_FLOW_OPS.get(graph.op_name[user])
        if flow is not None:
            if flow.results_from_operands:
                return store.edge_of_value(graph.op_results[user][index])
            if flow.block_args_from_operands:
                return store.edge_of_value(graph.op_blocks[user][0][0][index])
            return -1
        if graph.op_terminator[user]:
            parent = graph.op_parent[user]
            flow = DATA_FLOW_OPS.get(graph.op_name[parent]) if parent >= 0 else None
            if flow is None:
                return -1
            regions = flow.returning_regions
            if regions is not None and not any(
                    graph.op_blocks[parent][r][1][-1] == user for r in regions):
                return -1
            return store.edge_of_value(graph.op_results[parent][index])
        return -1

    # ------------------------------------------------------------------ func results
    def func_result_step(self, strategy: FactorPropagation) -> None:
        """Sync the main func's returned values with its result attributes (BOTH ways)."""
        if self.main_func < 0:
            return
        graph, store = self.graph, self.store
        blocks = graph.op_blocks[self.main_func]
        if not blocks:
            return
        ret = blocks[0][1][-1]
        shapes, slots = graph.value_shape, store.func_results[self.main_func]
        if self.recorder is not None:
            for i, value in enumerate(graph.op_operands[ret]):
                shape = shapes[value]
                if shape is not None:
                    self._func_result(value, slots[i], shape, strategy)
            return
        # Memoised on the shape and the two shardings' ids (the none-slot's is 0).
        memo = self._result_memo.setdefault(strategy, {})
        sid, read_slot = store.sid, store.read_slot
        for i, value in enumerate(graph.op_operands[ret]):
            shape = shapes[value]
            if shape is None:
                continue
            slot = slots[i]
            key = (shape, sid[read_slot[value]], sid[slot])
            updates = memo.get(key)
            if updates is None:
                updates = memo[key] = self._func_result_step(value, slot, shape, strategy)[0]
            if updates:
                self._apply_func_result(value, slot, updates)

    def _func_result(self, value: int, slot: int, shape: tuple[int, ...],
                     strategy: FactorPropagation) -> None:
        """One returned value's func-result step, its factor edges recorded."""
        updates, edges = self._func_result_step(value, slot, shape, strategy)
        self._apply_func_result(value, slot, updates)
        if updates:
            # Shardy reports the returned value as both operand and result.
            self.recorder.step((value, value), edges)

    def _apply_func_result(self, value: int, slot: int, updates: tuple) -> None:
        store = self.store
        for side, new in updates:
            if side == 0:
                self.update(value, new, notify=False)
            else:
                store.set_slot(slot, new)

    def _func_result_step(self, value: int, slot: int, shape: tuple[int, ...],
                          strategy: FactorPropagation) -> tuple[tuple, object]:
        """What the func-result step writes, ``((side, sharding), ...)`` (side 0: the
        returned value, 1: the result attribute), and its factor edges (origins only)."""
        store = self.store
        rule = identity_rule(shape)
        shardings = [store.get(value), store.value[slot]]
        mesh = self.common_mesh(shardings)
        if mesh is None:
            return (), None
        sizes = rule.factor_sizes
        mapping = rule.result_mappings[0]
        projections = [project(s, mapping, sizes) for s in shardings]
        before = factor_axes(projections) if self.recorder is not None else None
        flags_o, flags_r = strategy(projections[:1], projections[1:], sizes, lambda f: BOTH,
                                    conservative=False, elementwise=False)
        updates = []
        for side, flag in enumerate(flags_o + flags_r):
            if flag:
                new = back_project(projections[side], mapping, sizes, mesh.name)
                old = shardings[side]
                if not ((old is None and new.has_no_axes()) or new == old):
                    updates.append((side, new))
        edges = (factor_edges(before, projections, (mapping, mapping), 1)
                 if before is not None else None)
        return tuple(updates), edges


PropagateFn = Callable[[Driver], None]
