"""The search for AUTO argument shardings: fewest modelled seconds within a memory budget.

Every AUTO argument belongs to a structure group (``candidates.structure_groups``:
the weights of repeated layers are one group) whose members take one spec,
chosen among ``candidates.candidates``. A state closes each decided group's
members to its spec and leaves the undecided ones open, so propagation settles
them around the decided ones; it is priced by ``Evaluator`` (``objective``).
A state is better than another when it exceeds the budget by fewer bytes,
then when its step is faster.

* **Exhaustive** when the groups' candidate counts multiply to at most
  ``exhaustive_limit``: every combination is priced, the best kept.
* Otherwise **greedy, then coordinate descent**: every candidate of every group
  is priced alone (the rest open) and the best such move is decided first; then
  the other groups one at a time, most bytes first, each taking the candidate
  whose state (the groups decided so far, it, the rest open) is best, and groups
  propagation settled to one sharding around them taking it unpriced; then sweeps
  revisit every group with the others closed, moving it to a better one of the
  ``descent_width`` candidates its last pass ranked best, until a sweep moves none
  or ``max_evaluations`` states have been priced.

Repeated states are priced once. The outcome keeps, per group, every
candidate priced in the last pass over it: why the winner won and what the
runner-up would have cost (``report``).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

from shardc.compiler.auto.candidates import Spec, candidates, spec_of, tensor_sharding
from shardc.compiler.auto.evaluate import Evaluator
from shardc.compiler.auto.objective import StepTime
from shardc.compiler.propagation.values import ModuleValues


@dataclass
class Group:
    """Arguments that take one spec: function argument positions, names, candidates."""

    positions: list[int]
    names: list[str]
    shape: tuple[int, ...]
    element_bytes: int
    candidates: list[Spec]
    chosen: Spec | None = None
    settled: bool = False  # decided as propagation settled it, not by pricing candidates
    # spec -> the step of the state it was priced in, during the last pass over the group
    tried: dict[Spec, StepTime] = field(default_factory=dict)

    @property
    def bytes(self) -> int:
        return math.prod(self.shape) * self.element_bytes * len(self.positions)


@dataclass
class Outcome:
    """The best state: a spec per group, the result specs propagation gave it, its step."""

    groups: list[Group]
    results: list[Spec | None]
    step: StepTime
    evaluations: int
    seconds: float
    exhaustive: bool
    budget: int | None


class Search:
    def __init__(self, evaluator: Evaluator, groups: list[Group], axes: list[tuple[str, int]],
                 budget: int | None, *, max_evaluations: int = 160,
                 exhaustive_limit: int = 64, descent_width: int = 3):
        self.evaluate = evaluator
        self.groups = groups
        self.sizes = dict(axes)
        self.budget = budget
        self.max_evaluations = max_evaluations
        self.exhaustive_limit = exhaustive_limit
        self.descent_width = descent_width
        self._priced: dict[tuple, StepTime] = {}
        self._readers: dict[tuple, ModuleValues] = {}
        self.best: tuple[tuple, StepTime, ModuleValues] | None = None

    def score(self, step: StepTime) -> tuple[int, float, int]:
        """Bytes over the budget, then seconds, then memory peak (ties: the lighter)."""
        over = 0 if self.budget is None else max(0, step.memory_peak - self.budget)
        return over, step.seconds, step.memory_peak

    def price(self, specs: dict[int, Spec]) -> StepTime:
        """The step of the state where group ``g`` is closed to ``specs[g]``, others open."""
        key = tuple(sorted(specs.items()))
        found = self._priced.get(key)
        if found is None:
            assignment = {}
            for g, spec in specs.items():
                group = self.groups[g]
                sharding = tensor_sharding(self.evaluate.mesh, spec, self.sizes)
                for position in group.positions:
                    assignment[position] = sharding
            found, reader = self.evaluate(assignment)
            self._priced[key] = found
            # The last few states' propagated values: what settles the groups left open.
            self._readers[key] = reader
            while len(self._readers) > 16:
                del self._readers[next(iter(self._readers))]
            if len(specs) == len(self.groups) and (
                    self.best is None or self.score(found) < self.score(self.best[1])):
                self.best = (key, found, reader)
        return found

    def settled(self, specs: dict[int, Spec], group: Group) -> Spec | None:
        """The spec propagation gave every member of ``group`` (open) in the state of
        ``specs``, when it gave them one with axes, the same for all; else None."""
        reader = self._readers.get(tuple(sorted(specs.items())))
        if reader is None:
            return None
        store = reader.store
        found = set()
        for position in group.positions:
            slot = store.slot_of[self.evaluate.arguments[position]]
            sharding = store.value[slot] if slot >= 0 else None
            found.add(spec_of(sharding, len(group.shape)) if sharding is not None else None)
        (spec,) = found if len(found) == 1 else (None,)
        if spec is None or not any(spec):
            return None
        return spec

    def run(self) -> Outcome:
        start = time.perf_counter()
        space = math.prod(len(g.candidates) for g in self.groups)
        exhaustive = space <= self.exhaustive_limit
        if exhaustive:
            self._exhaustive()
        else:
            self._greedy()
            self._descend()
        key, step, reader = self.best
        for g, spec in key:
            self.groups[g].chosen = spec
        return Outcome(self.groups, _result_specs(reader), step, len(self._priced),
                       time.perf_counter() - start, exhaustive, self.budget)

    def _exhaustive(self) -> None:
        combos = _product([g.candidates for g in self.groups])
        for combo in combos:
            specs = dict(enumerate(combo))
            step = self.price(specs)
            for g, spec in specs.items():
                group = self.groups[g]
                known = group.tried.get(spec)
                if known is None or self.score(step) < self.score(known):
                    group.tried[spec] = step  # the best state with that choice

    def _greedy(self) -> None:
        decided: dict[int, Spec] = {}
        order = sorted(range(len(self.groups)), key=lambda g: -self.groups[g].bytes)
        # The first decision is the best single move of any group (the others open): the
        # one the rest settles around. By bytes alone a weight would go first and
        # propagation would shard the model around it, never finding that the batch
        # alone sharded (weights replicated) is cheaper on a small model.
        for g in order:
            group = self.groups[g]
            group.tried = {spec: self.price({g: spec}) for spec in group.candidates}
        first = min(order, key=lambda g: min(self.score(t) for t in self.groups[g].tried.values()))
        order.remove(first)
        order.insert(0, first)
        for g in order:
            if g in decided:
                continue
            group = self.groups[g]
            group.tried = {spec: self.price({**decided, g: spec}) for spec in group.candidates}
            decided[g] = min(group.tried, key=lambda s: self.score(group.tried[s]))
            # Groups propagation settled around the decided ones take what it gave them
            # (closing them to it is the same state): optimizer moments follow their
            # parameters through the update. The descent revisits them.
            state = dict(decided)
            for h in order:
                if h not in decided:
                    spec = self.settled(state, self.groups[h])
                    if spec is not None and spec in self.groups[h].candidates:
                        decided[h] = spec
                        self.groups[h].settled = True
        self.state = decided
        self.price(decided)

    def _descend(self) -> None:
        moved = True
        while moved and len(self._priced) < self.max_evaluations:
            moved = False
            for g, group in enumerate(self.groups):
                current = self.state[g]
                tried = {current: self.price(self.state)}
                # The candidates the last pass over the group ranked best: the others
                # were far behind in a state that differs from this one in a few groups.
                ranked = sorted(group.tried, key=lambda s: self.score(group.tried[s]))
                for spec in ranked[:self.descent_width] or group.candidates:
                    if len(self._priced) >= self.max_evaluations:
                        break
                    tried[spec] = self.price({**self.state, g: spec})
                if len(tried) > 1:  # else the greedy pass's prices say more
                    group.tried = tried
                best = min(tried, key=lambda s: self.score(tried[s]))
                if self.score(tried[best]) < self.score(tried[current]):
                    self.state[g] = best
                    moved = True


def _product(lists: list[list[Spec]]) -> list[tuple[Spec, ...]]:
    combos: list[tuple[Spec, ...]] = [()]
    for options in lists:
        combos = [c + (o,) for c in combos for o in options]
    return combos


def _result_specs(reader: ModuleValues) -> list[Spec | None]:
    """The main function's result shardings in ``reader``, as specs (None: a sub-axis)."""
    store, graph = reader.store, reader.graph
    main = next(f for f in store.funcs if graph.op_parent[f] == -1)
    return [spec_of(store.value[slot], store.rank[slot]) for slot in store.func_results[main]]


def make_groups(evaluator: Evaluator, positions: list[int], names: list[str],
                axes: list[tuple[str, int]], structure: list[list[int]]) -> list[Group]:
    """One ``Group`` per structure group (indices into ``positions``)."""
    graph = evaluator.read.graph
    groups = []
    for members in structure:
        value = evaluator.arguments[positions[members[0]]]
        shape = graph.value_shape[value] or ()
        element = evaluator.element_bytes(value)
        groups.append(Group([positions[m] for m in members], [names[m] for m in members],
                            tuple(shape), element, candidates(shape, axes)))
    return groups


__all__ = ["Group", "Outcome", "Search", "candidates", "make_groups"]
