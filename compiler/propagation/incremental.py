"""Incremental re-propagation: a recorded run, and runs from other starts replayed on it.

A propagation on a ``SharedRead`` is a deterministic sequence of *ticks*: the
phases of its plan (user-priority initialisation and restores, func-result
steps, worklist stages) and, in each stage, one visit per popped op. A run
from starting shardings that differ in a few slots (a cost-aware pin, a move
of the auto-sharding search, a user edit) visits the same ops in the same
order as long as every visit writes the same slots: what a visit queues
depends only on which values it wrote, never on their shardings. So
``Propagation.repropagate`` follows the recorded run and keeps only the
*difference*: the slots whose sharding differs from the recorded run's at the
same tick. A visit that reads no such slot (nor a sibling of one) writes what
it wrote in the recorded run and is skipped; a visit that does is an *event*,
computed with the driver's own step (memoised) on a scratch store holding the
slots it reads; the difference is then updated, and the visits of the ops that
read a newly differing slot become events. Only what the change reaches is
visited. The result is the recorded run's final store with the difference
applied, which is exactly what propagating from the new starts gives: every
skipped visit provably wrote the same, every event was computed as the full
run computes it.

Where an event writes other slots than the recorded visit did, the worklists
part: the new run's own cascade is then run for real (``_StageReplay.diverge``:
the worklist at that tick is rebuilt from the sweep's last visit, when it held
only the ops the sweep had not reached) until the sweep's next op is on top
again, where both runs' worklists are the same and the difference is taken
anew. Where the new starts give other user-priority rounds, or the difference
reaches so many visits that following it costs more than a run (``budget``),
the store is propagated from scratch instead (``fallbacks`` counts them): the
answer is the same either way, only its cost differs.

    read = SharedRead(module)
    base = read.recorded("user-priority", starts)       # one full run, recorded
    store = base.repropagate(other_starts)              # == read.propagate(plan, other_starts)
"""

from __future__ import annotations

import copy
from bisect import bisect_left, bisect_right
from collections import Counter
from collections.abc import Collection
from heapq import heapify, heappop, heappush
from typing import TYPE_CHECKING, NamedTuple

from jaxlib.mlir import ir

from shardc.compiler.propagation.collection import cyclic_gc_paused
from shardc.compiler.propagation.driver import Driver
from shardc.compiler.propagation.ir_access import ShardingStore
from shardc.compiler.propagation.user_priority import initialise, live_slots, restore

if TYPE_CHECKING:
    from shardc.compiler.propagation import SharedRead


class Phase(NamedTuple):
    """One phase of a recorded run and the store as it was when the phase began."""

    kind: str  # "init", "restore", "results", "stage" or "end"
    payload: object  # restore: the priority; results: the strategy; stage: (strategy, direction)
    tick: int  # the phase's boundary tick (its visits follow)
    values: list  # ``store.value`` at the phase's start
    sids: list[int]  # ``store.sid`` at the phase's start


class Recorder:
    """What a run did (``Driver.trace``): its phases, the op of every visit and every
    write (``ShardingStore.log``), each visit's writes from ``marks[tick]`` to
    ``marks[tick + 1]`` of the log. A phase boundary is a tick of its own (op -1)."""

    def __init__(self, store: ShardingStore):
        self.store = store
        self.log: list[tuple] = []
        store.log = self.log
        self.visits: list[int] = []
        self.marks: list[int] = []
        self.phases: list[Phase] = []

    def phase(self, kind: str, payload: object) -> None:
        store = self.store
        self.phases.append(Phase(kind, payload, len(self.visits), list(store.value),
                                 list(store.sid)))
        self.visits.append(-1)
        self.marks.append(len(self.log))

    def visit(self, op: int) -> None:
        self.visits.append(op)
        self.marks.append(len(self.log))

    def finish(self) -> None:
        """End the record (the last phase holds the final store); stop logging."""
        self.phase("end", None)
        self.store.log = None


class _Stage(NamedTuple):
    """A recorded stage indexed for replay: each op's visits, each slot's writes."""

    visits: dict[int, list[int]]  # op -> its ticks in the stage, ascending
    writes: dict[int, tuple[list[int], list[tuple]]]  # slot -> (ticks, (sharding, sid))
    # The ticks of the sweep's visits (each op's first), ascending: the worklist holds
    # nothing but the ops the sweep has not reached when one is popped.
    sweep: list[int]
    end: int  # the tick of the phase after the stage


class Propagation:
    """One recorded propagation of a ``SharedRead`` (``SharedRead.recorded``), from which
    propagations from other starting shardings are re-propagated (``repropagate``).

    ``store`` is the recorded run's result (never to be written to). After each
    ``repropagate``, ``changed`` holds the slots whose sharding differs from it and
    ``changed_ops()`` the ops that read them: what a cost model must price again.
    ``events``, ``ticks`` and ``fallbacks`` count, over every ``repropagate`` call,
    the visits computed, the ticks followed and the runs propagated from scratch.
    """

    def __init__(self, read: SharedRead, plan: str, starts: dict[int, ir.Attribute],
                 unsharded: tuple[Collection[int], Collection[int]], driver: Driver,
                 trace: Recorder, start_slots: dict[int, tuple]):
        self.read = read
        self.plan = plan
        self.starts = dict(starts)
        self.unsharded = unsharded
        self.store = driver.store
        # Computed visits per recorded tick above which a run from scratch is cheaper
        # (a computed visit costs about ten memoised ones).
        self.budget = 0.05
        self.events = 0
        self.ticks = 0
        self.fallbacks = 0
        # The slots whose sharding the last ``repropagate`` gave differently from this run.
        self.changed: set[int] = set()
        self._trace = trace
        self._start_slots = start_slots  # slot -> (sharding, sid) the starts set
        self._usable = driver.reusable()
        self._stages: dict[int, _Stage] = {}
        self._base_counts: Counter | None = None  # writes per slot in the recorded run
        self._live: set[int] | None = None
        self._priorities: Counter | None = None  # live slots per priority, at the start
        self._watched: dict[int, tuple[int, ...]] = {}
        self._watchers: dict[int, list[int]] = {}
        # Computes the events: the first run's plans and caches, on a scratch store
        # whose slots are set to what each event reads before it is computed.
        self._scratch = read.store.fresh_copy()
        self._driver = Driver(read.graph, self._scratch, {}, after=read.first)  # the first run's, complete (``Driver.reusable``)
        self._scratch.log = []
        self._result_slots: set[int] | None = None
        self._value_of_slot: dict[int, int] | None = None

    # ------------------------------------------------------------------ entry
    def repropagate(self, starts: dict[int, ir.Attribute],
                    unsharded: tuple[Collection[int], Collection[int]] = ((), ())
                    ) -> ShardingStore | None:
        """The store ``read.propagate(plan, starts, unsharded)`` gives (None where it gives
        None), computed from this recorded run: only the visits the differing starts
        reach are computed again."""
        read = self.read
        slots = start_slots(read.store, starts, unsharded)
        if slots is None:
            return None
        store = self._followed(slots) if self._usable else None
        if store is None:
            self.fallbacks += 1
            store = read.propagate(self.plan, starts, unsharded)
            final = self._trace.phases[-1].sids
            self.changed = {slot for slot, (now, then) in enumerate(zip(store.sid, final))
                            if now != then}
        else:
            read.runs += 1
            # Each op's ``sdy.sharding`` as ``SharedRead.propagate``'s store holds it: as
            # read but the starts', in a dict of this store's own (``write_back`` adds to it).
            store.sharding_attrs = {**read.store.sharding_attrs, **starts}
        return store

    def changed_ops(self) -> set[int]:
        """The ops whose step reads a slot of ``changed``: the only ops whose shardings
        differ from the recorded run's after the last ``repropagate`` (to price again)."""
        readers = self._scratch.readers
        return {op for slot in self.changed for op in readers[slot]}

    def _followed(self, slots: dict[int, tuple]) -> ShardingStore | None:
        """The run from start ``slots`` followed on the recorded one (None where it
        cannot be, or would cost more than a run from scratch)."""
        read = self.read
        original_value, original_sid = read.store.value, read.store.sid
        base, changed = self._start_slots, {}
        for slot in set(base) | set(slots):
            then = base.get(slot, (original_value[slot], original_sid[slot]))
            now = slots.get(slot, (original_value[slot], original_sid[slot]))
            if then[1] != now[1]:
                changed[slot] = now
        if self._rounds_differ(changed):
            return None  # other user-priority rounds: not the recorded run
        replay = _Replay(self, changed, slots)
        with cyclic_gc_paused():
            store = replay.run()
        self.events += replay.events
        self.ticks += len(self._trace.visits)
        if store is not None:
            self.changed = set(replay.diff)
        return store

    def _rounds_differ(self, changed: dict[int, tuple]) -> bool:
        """Whether starts that differ in ``changed`` give other user-priority rounds
        (another set of priorities over the live slots) than the recorded run's."""
        phases = self._trace.phases
        if not phases or phases[0].kind != "init":
            return False
        live, start = self.live(), phases[0].values
        if self._priorities is None:
            self._priorities = Counter(p for slot in live for p in _priorities(start[slot]))
        delta: Counter = Counter()
        for slot, (sharding, _) in changed.items():
            if slot in live:
                delta.subtract(_priorities(start[slot]))
                delta.update(_priorities(sharding))
        counts = self._priorities
        return any((counts[p] > 0) != (counts[p] + d > 0) for p, d in delta.items())

    # ------------------------------------------------------------------ indices
    def stage(self, index: int) -> _Stage:
        """Phase ``index`` (a stage) indexed: built on the first replay that reaches it."""
        found = self._stages.get(index)
        if found is None:
            trace = self._trace
            begin, end = trace.phases[index].tick, trace.phases[index + 1].tick
            visits: dict[int, list[int]] = {}
            writes: dict[int, tuple[list[int], list[tuple]]] = {}
            ops, marks, log = trace.visits, trace.marks, trace.log
            sweep = []
            for tick in range(begin + 1, end):
                ticks = visits.get(ops[tick])
                if ticks is None:
                    ticks = visits[ops[tick]] = []
                    sweep.append(tick)
                ticks.append(tick)
                for slot, sharding, sid, _ in log[marks[tick]:marks[tick + 1]]:
                    entry = writes.get(slot)
                    if entry is None:
                        entry = writes[slot] = ([], [])
                    entry[0].append(tick)
                    entry[1].append((sharding, sid))
            found = self._stages[index] = _Stage(visits, writes, sweep, end)
        return found

    def value_of_slot(self) -> dict[int, int]:
        """Slot -> the value whose writes notify (``Driver._update``'s storage value)."""
        if self._value_of_slot is None:
            store = self.read.store
            self._value_of_slot = {slot: value for value, slot in enumerate(store.slot_of)
                                   if slot >= 0 and store.storage[value] == value}
        return self._value_of_slot

    def base_counts(self) -> Counter:
        if self._base_counts is None:
            self._base_counts = Counter(entry[0] for entry in self._trace.log)
        return self._base_counts

    def live(self) -> set[int]:
        if self._live is None:
            self._live = live_slots(self.read.store)
        return self._live

    def result_slots(self) -> set[int]:
        """The slots the func-result steps read and write (siblings included)."""
        if self._result_slots is None:
            driver, store, graph = self._driver, self.read.store, self.read.graph
            found: set[int] = set()
            if driver.main_func >= 0 and graph.op_blocks[driver.main_func]:
                ret = graph.op_blocks[driver.main_func][0][1][-1]
                found.update(store.read_slot[v] for v in graph.op_operands[ret])
                found.update(store.func_results[driver.main_func])
            self._result_slots = self.with_siblings(found)
        return self._result_slots

    def with_siblings(self, slots: Collection[int]) -> set[int]:
        siblings = self.read.store.siblings
        out = set(slots)
        for slot in slots:
            if slot < len(siblings):  # the none-slot has none
                out.update(siblings[slot])
        return out

    def watched(self, op: int) -> tuple[int, ...]:
        """The slots op ``op``'s step reads or may write (its slots and their siblings)."""
        found = self._watched.get(op)
        if found is None:
            plan = self._driver._plans[op]
            found = self._watched[op] = tuple(self.with_siblings(plan.slots))
        return found

    def watchers(self, slot: int) -> list[int]:
        """The ops whose steps read ``slot`` or a sibling of it (or may write them)."""
        found = self._watchers.get(slot)
        if found is None:
            readers = self._scratch.readers
            found = list(dict.fromkeys(
                op for member in self.with_siblings((slot,)) for op in readers[member]))
            self._watchers[slot] = found
        return found


def _priorities(sharding) -> set[int]:
    return set() if sharding is None else {d.priority for d in sharding.dims if d.priority}


def start_slots(store: ShardingStore, starts: dict[int, ir.Attribute],
                 unsharded: tuple[Collection[int], Collection[int]]
                 ) -> dict[int, tuple] | None:
    """Slot -> (sharding, sid) that ``starts`` and ``unsharded`` set (in the order
    ``SharedRead.propagate`` applies them); None where it would refuse one."""
    out: dict[int, tuple] = {}
    for op, attribute in starts.items():
        found = store.start_slot(op, attribute)
        if found is None:
            return None
        slot, sharding = found
        out[slot] = (sharding, store.intern(sharding))
    if unsharded[0] or unsharded[1]:
        slots = store.unsharded_slots(*unsharded)
        if slots is None:
            return None
        for slot in slots:
            out[slot] = (None, 0)
    return out


class _Replay:
    """One ``repropagate``: the recorded run followed with a difference.

    ``diff`` maps each slot whose sharding differs from the recorded run's at the
    current tick to the new run's ``(sharding, sid)``.
    """

    def __init__(self, base: Propagation, changed: dict[int, tuple], starts: dict[int, tuple]):
        self.base = base
        self.trace = base._trace
        self.diff = dict(changed)
        self.starts = starts  # the new run's start slots (the rest as read)
        self.started = set(changed)  # slots whose start differs from the recorded run's
        self.scratch = base._scratch
        self.driver = base._driver
        self.events = 0
        self.limit = max(16, int(base.budget * len(self.trace.visits)))
        self.delta: Counter = Counter()  # writes per slot: the new run's minus the recorded

    def run(self) -> ShardingStore | None:
        phases = self.trace.phases
        for index, phase in enumerate(phases[:-1]):
            if not self.diff and not self.started:
                break
            kind = phase.kind
            if kind in ("init", "restore"):
                self._per_slot(index, phase.payload)
            elif kind == "results":
                self._results(index)
            elif not self._stage(index):
                return None
            # The starts matter to initialisation and restores only: once the run has
            # none left, nothing but the difference can make it differ.
            if kind == "init" and not any(p.kind == "restore" for p in phases):
                self.started = set()
        return self._result()

    # ------------------------------------------------------------------ slots
    def _set(self, slot: int, value: tuple) -> None:
        scratch = self.scratch
        scratch.value[slot], scratch.sid[slot] = value

    def _reconcile(self, slots: Collection[int], sids: list[int]) -> None:
        """Compare ``slots`` on the scratch store with the recorded run's ``sids`` (after
        the phase); update the difference."""
        scratch, diff = self.scratch, self.diff
        for slot in slots:
            sid = scratch.sid[slot]
            if sid == sids[slot]:
                diff.pop(slot, None)
            else:
                diff[slot] = (scratch.value[slot], sid)

    def _count(self, removed: list[tuple], added: list[tuple]) -> None:
        delta = self.delta
        for entry in removed:
            delta[entry[0]] -= 1
        for entry in added:
            delta[entry[0]] += 1

    def _phase_log(self, index: int) -> list[tuple]:
        trace = self.trace
        return trace.log[trace.marks[trace.phases[index].tick]:
                         trace.marks[trace.phases[index + 1].tick]]

    # ------------------------------------------------------------------ phases
    def _per_slot(self, index: int, priority: int | None) -> None:
        """User-priority initialisation (``priority`` None) or a restore, on the slots that
        differ or started differently (with their siblings), in the recorded order."""
        base, trace = self.base, self.trace
        phase, after = trace.phases[index], trace.phases[index + 1]
        slots = sorted(base.with_siblings(set(self.diff) | self.started))
        for slot in slots:
            self._set(slot, self.diff.get(slot) or (phase.values[slot], phase.sids[slot]))
        log = self.scratch.log
        mark = len(log)
        live = base.live()
        if priority is None:
            initialise(self.scratch, [slot for slot in slots if slot in live])
        else:
            references = []
            for slot in slots:
                original = self._start(slot)[0]
                if slot in live and original is not None and any(
                        d.priority == priority for d in original.dims):
                    references.append((slot, original))
            restore(self.scratch, references, priority)
        chosen = set(slots)
        removed, primary = [], False
        for entry in self._phase_log(index):
            if entry[3]:
                primary = entry[0] in chosen
            if primary:
                removed.append(entry)
        self._count(removed, log[mark:])
        del log[mark:]
        self._reconcile(slots, after.sids)

    def _start(self, slot: int) -> tuple:
        read = self.base.read.store
        return self.starts.get(slot, (read.value[slot], read.sid[slot]))

    def _results(self, index: int) -> None:
        """A func-result step: computed again when it touches the difference."""
        slots = self.base.result_slots()
        if not any(slot in self.diff for slot in slots):
            return
        phase, after = self.trace.phases[index], self.trace.phases[index + 1]
        for slot in slots:
            self._set(slot, self.diff.get(slot) or (phase.values[slot], phase.sids[slot]))
        log = self.scratch.log
        mark = len(log)
        self.driver.func_result_step(phase.payload)
        self._count(self._phase_log(index), log[mark:])
        del log[mark:]
        self._reconcile(slots, after.sids)

    def _stage(self, index: int) -> bool:
        """A worklist stage: only the visits of ops that read the difference (False: over
        budget)."""
        stage = _StageReplay(self, index)
        return stage.run()

    # ------------------------------------------------------------------ result
    def _result(self) -> ShardingStore:
        base, final = self.base, self.trace.phases[-1]
        read = base.read.store
        store = copy.copy(read)
        store.value = list(final.values)
        store.sid = list(final.sids)
        for slot, (sharding, sid) in self.diff.items():
            store.value[slot] = sharding
            store.sid[slot] = sid
        dirty = set(base.store.dirty)
        counts = base.base_counts()
        for slot, change in self.delta.items():
            if counts[slot] + change > 0:
                dirty.add(slot)
            else:
                dirty.discard(slot)
        store.dirty = dirty
        store.readers = self.scratch.readers
        store.settled = [-1] * len(read.settled)
        store.erase_log = []
        store.log = None
        return store


class _Positions:
    """A driver's worklist positions while a cascade is run (``_StageReplay.diverge``):
    ops after ``swept`` in program order, which the sweep has not reached, are queued;
    the others only while they are on the cascade."""

    def __init__(self, swept: int):
        self.swept = swept
        self.queued: dict[int, int] = {}

    def __getitem__(self, op: int) -> int:
        return self.queued.get(op, 0 if op > self.swept else -1)

    def __setitem__(self, op: int, index: int) -> None:
        if index < 0:
            self.queued.pop(op, None)
        else:
            self.queued[op] = index


class _StageReplay:
    """One stage of a ``_Replay``: the recorded visits that read the difference, in tick
    order (a heap of each such op's next visit), computed again; where one writes other
    slots than it did, the new run's own cascade from there (``diverge``)."""

    def __init__(self, replay: _Replay, index: int):
        self.replay = replay
        self.base = replay.base
        self.trace = trace = replay.trace
        self.phase = trace.phases[index]
        self.strategy, self.direction = self.phase.payload
        self.stage = self.base.stage(index)
        self.driver = driver = replay.driver
        self.scratch = replay.scratch
        self.diff = replay.diff
        self.memo = driver._memo.setdefault(self.strategy, {})
        self.dir_cache = driver._dir_cache.setdefault(self.direction, {})
        self.heap: list[tuple[int, int]] = []
        self.last: dict[int, int] = {}  # op -> the last tick of it computed

    def queue(self, op: int, after: int) -> None:
        """Queue ``op``'s first visit after tick ``after``."""
        ticks = self.stage.visits.get(op)
        if ticks:
            k = bisect_right(ticks, after)
            if k < len(ticks):
                heappush(self.heap, (ticks[k], op))

    def recorded(self, slot: int, tick: int, inclusive: bool = False) -> tuple:
        """The recorded run's ``(sharding, sid)`` of ``slot`` before tick ``tick`` (after
        it, ``inclusive``)."""
        entry = self.stage.writes.get(slot)
        if entry is not None:
            k = (bisect_right if inclusive else bisect_left)(entry[0], tick) - 1
            if k >= 0:
                return entry[1][k]
        return self.phase.values[slot], self.phase.sids[slot]

    def step(self, op: int, view) -> tuple:
        """Op ``op``'s step on the shardings ``view(slot)`` gives (set on the scratch store)."""
        scratch, driver = self.scratch, self.driver
        for slot in self.base.watched(op):
            scratch.value[slot], scratch.sid[slot] = view(slot)
        plan = driver._plans[op]
        sids = tuple(map(scratch.sid.__getitem__, plan.slots))
        if not any(sids):
            return ()
        head = self.dir_cache.get(op)
        if head is None:
            head = driver._factor_directions(op, plan, self.direction)
        key = (head, sids)
        updates = self.memo.get(key)
        if updates is None:
            updates = self.memo[key] = driver._step(plan, driver._head_dirs[head],
                                                    self.strategy)
        return updates

    def write(self, op: int, updates: tuple, notify: bool) -> list[tuple]:
        """Apply ``updates`` of ``op`` to the scratch store; the writes (its log entries)."""
        driver, log = self.driver, self.scratch.log
        mark = len(log)
        values = driver._plans[op].values
        driver.current = op
        for i, new, sid in updates:
            driver._update(values[i], new, sid, notify)
        driver.current = -1
        written = log[mark:]
        del log[mark:]
        return written

    def run(self) -> bool:
        replay, diff, base = self.replay, self.diff, self.base
        trace, heap, last = self.trace, self.heap, self.last
        marks, log = trace.marks, trace.log
        storage, slot_of = self.scratch.storage, self.scratch.slot_of
        visits = self.stage.visits
        for op in {op for slot in diff for op in base.watchers(slot)}:
            ticks = visits.get(op)
            if ticks:
                heap.append((ticks[0], op))
        heapify(heap)
        recorded = self.recorded
        while heap:
            tick, op = heappop(heap)
            if last.get(op, -1) >= tick:
                continue
            last[op] = tick
            watched = base.watched(op)
            if not any(slot in diff for slot in watched):
                continue
            replay.events += 1
            if replay.events > replay.limit:
                return False
            updates = self.step(op, lambda slot: diff.get(slot) or recorded(slot, tick))
            then = log[marks[tick]:marks[tick + 1]]
            values = self.driver._plans[op].values
            wrote = [slot_of[storage[values[i]]] for i, _, _ in updates]
            if [slot for slot in wrote if slot >= 0] != [e[0] for e in then if e[3]]:
                # Another worklist from here on: the new run's cascade, then the sweep's
                # next op, where both runs' worklists are the same again.
                rejoin = self.diverge(tick, op, updates)
                if rejoin is None:
                    return False
                heap.clear()
                for slot in diff:
                    for other in base.watchers(slot):
                        self.queue(other, rejoin - 1)
                continue
            now = self.write(op, updates, False)
            replay._count(then, now)
            touched = {entry[0] for entry in then}
            touched.update(entry[0] for entry in now)
            scratch = self.scratch
            for slot in touched:
                if scratch.sid[slot] == recorded(slot, tick, True)[1]:
                    diff.pop(slot, None)
                else:
                    if slot not in diff:
                        for other in base.watchers(slot):
                            self.queue(other, tick)
                    diff[slot] = (scratch.value[slot], scratch.sid[slot])
            if any(slot in diff for slot in watched):
                self.queue(op, tick)
        return True

    def diverge(self, tick: int, op: int, updates: tuple) -> int | None:
        """The new run leaves the recorded one at ``tick``: op ``op`` writes ``updates``.

        The worklist at ``tick`` is rebuilt from the sweep's last visit (the worklist
        then holds only the ops the sweep has not reached) by replaying the recorded
        notifications since; the new run's cascade is then run for real until the
        sweep's next op is on top, where the difference to the recorded run is taken
        again. Returns that op's tick (None: over budget).
        """
        replay, base, driver, diff = self.replay, self.base, self.driver, self.diff
        trace, stage = self.trace, self.stage
        marks, log, visits = trace.marks, trace.log, trace.visits
        plans = driver._plans
        j = bisect_right(stage.sweep, tick) - 1
        start = stage.sweep[j]
        rejoin = stage.sweep[j + 1] if j + 1 < len(stage.sweep) else stage.end
        swept = visits[start]
        # The worklist holds the cascade only; the ops the sweep has not reached read
        # as queued (they are, below it), so nothing queues them again.
        worklist = [swept]
        position = _Positions(swept)
        driver.worklist, driver.position = worklist, position
        value_of = base.value_of_slot()
        at = start
        while True:  # the recorded run up to ``tick``: its notifications only
            popped = worklist.pop()
            position[popped] = -1
            if plans[popped] is False:
                continue
            if at == tick:
                break
            driver.current = popped
            for entry in log[marks[at]:marks[at + 1]]:
                if entry[3]:
                    driver.notify(value_of[entry[0]])
            driver.current = -1
            at += 1
        mine: dict[int, tuple] = {}

        def view(slot: int) -> tuple:
            return mine.get(slot) or diff.get(slot) or self.recorded(slot, tick)

        added = self.write(op, updates, True)
        for entry in added:
            mine[entry[0]] = (entry[1], entry[2])
        while worklist:  # the new run's cascade, until the sweep's next op is on top
            popped = worklist.pop()
            position[popped] = -1
            if plans[popped] is False:
                continue
            replay.events += 1
            if replay.events > replay.limit:
                return None
            written = self.write(popped, self.step(popped, view), True)
            for entry in written:
                mine[entry[0]] = (entry[1], entry[2])
            added += written
        removed = log[marks[tick]:marks[rejoin]]
        replay._count(removed, added)
        for slot in set(diff) | set(mine) | {entry[0] for entry in removed}:
            value = view(slot)
            if value[1] == self.recorded(slot, rejoin)[1]:
                diff.pop(slot, None)
            else:
                diff[slot] = value
        return rejoin
