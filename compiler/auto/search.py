"""The search for AUTO argument shardings: fewest modelled seconds within a memory budget.

Every AUTO argument belongs to a structure group (``candidates.structure_groups``:
the weights of repeated layers are one group) whose members take one spec,
chosen among ``candidates.candidates``. A state closes each decided group's
members to its spec and leaves the undecided ones open, so propagation settles
them around the decided ones; it is priced by ``Evaluator`` (``objective``).
A state is better than another when it exceeds the budget by fewer bytes
(``Evaluator.memory``: ``Lowered.memory_estimate``'s model, asked for only where
it can change a ranking: ``Search.ranked``), then when its operations per device
stay within ``FLOPS_SLACK`` of the fewest a textbook configuration needs
(``Search.flops_limit``), then when its step is faster.

* **Exhaustive** when the groups' candidate counts multiply to at most
  ``exhaustive_limit``: every combination is priced, the best kept.
* Otherwise **greedy, seeds, then coordinate descent**: every candidate of every
  group is priced alone (the rest open) and the best such move is decided
  first; then the other groups one at a time, most bytes first, each taking the
  candidate whose state (the groups decided so far, it, the rest open) is best,
  and groups propagation settled to one sharding around them taking it
  unpriced. The textbook configurations (``candidates.structured_seeds``: data
  parallel, FSDP, tensor parallel, FSDP x tensor parallel) are priced as whole
  states, the best of them refined (``Search._refine``: per weight, one axis
  taken off where the step gets faster within the budget). Sweeps then revisit every group with the others closed, moving it to
  a better one of the ``descent_width`` candidates its last pass ranked best,
  until a sweep moves none or ``descent_evaluations`` more states (at least
  ``max_evaluations`` in all) have been priced: from the best of the greedy and
  seed states, and from the fastest of them where that one exceeds the budget.

Repeated states are priced once. The outcome keeps, per group, every
candidate priced in the last pass over it: why the winner won and what the
runner-up would have cost (``report``).

**Compiled**: the memory model counts some states' heaps short of what XLA
allocates (its schedule and packing of temporaries differ from the model's
walk), so a state within the budget by the model may not be within it as XLA
compiles it. Where the caller can compile a state (``Search.fit_compiled``),
the chosen one is compiled: over the budget, the model's bytes are held to the
budget scaled by that state's own error (the model's bytes over XLA's) and the
states priced are ranked again, the best not compiled yet compiled next (where
none is within the model's bytes so held, the least over them: the model's error
differs between states): ``COMPILED_TRIES`` programs, more while compiling has
taken less time than the search; the first within the budget is kept, else the
one least over it. States that propagate to the same axes everywhere are one program,
compiled once (``Search._program``). Where nothing is left to compile, a descent from
the compiled state XLA puts least over the budget, under the model's bytes held to
that state's own error, prices its lighter neighbours, and the one it ends in is
compiled (``COMPILED_TRIES`` such origins at most): the model's error differs between
states more than between a state and its neighbours. Then, where no state priced is within
the model's bytes held, a descent under them from the least over prices lighter
states, and the best it finds is compiled (``COMPILED_TRIES`` descents at most). The textbook configurations
within the budget by the model are compiled instead of the next state where that
one is no faster, and after the tries are spent with those over it by less than
the model's error (it counts some states long): a budget one of them meets is met
no slower than it. A choice the model puts under the budget by more than its error
(``MODEL_ERROR``) is not compiled. Last, the textbook states that rank before the
state kept but for their memory, within the model's error of the budget, are
compiled in turn and the first XLA fits is kept (``_textbook_ahead``): the state
returned is no slower than any textbook state XLA fits in the budget (an expert's
FSDP x tensor parallel among them), whatever the model's bytes say of it.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from shardc.compiler.auto.candidates import (
    CONFIGURATIONS,
    Image,
    Spec,
    activation_candidates,
    activation_seed,
    candidates,
    convolution_result,
    is_residual,
    model_width,
    projects_weight,
    spec_of,
    starts_stream,
    structured_seeds,
    tensor_sharding,
    weight_roles,
    window_dims,
)
from shardc.compiler.auto.evaluate import Evaluator, main_function, main_values
from shardc.compiler.auto.objective import StepTime
from shardc.compiler.propagation.values import ModuleValues

# How many more operations per device than the least a textbook configuration needs a
# state may take before it ranks after every state within that: the step-time model trades
# compute for communication at the platform's peak rates, and a state that buys a
# little modelled communication with much replicated compute (every device computing
# what it could have split) is a loss wherever compute runs below peak, which the
# model does not see. The textbook configurations split every op (data parallel,
# FSDP x tensor parallel), so the least is close to the work divided by the devices
# (the least of every priced state would not do: a state the model counts short sets
# a limit no real state meets).
# 2%: the replicated scalars and norms any state keeps, with room left within 5% of
# that for the model's own error against XLA's count of the state (a few % either way).
FLOPS_SLACK = 0.02
# States whose modelled seconds differ by less than this fraction are equally fast: the
# same collectives and operations summed in another order differ in the last digits.
SAME_SECONDS = 1e-6
# Programs compiled to find a state within the budget as XLA compiles it (each is a
# lowering and an XLA compilation: seconds on a large step): this many, then more only
# while compiling has taken less time than the search (at most doubling its cost).
COMPILED_TRIES = 3
# The most XLA's bytes per device have exceeded the memory model's on a state AUTO chose
# (1.42x: a Mamba-like scan's temporaries, 2x4; 1.2-1.3x on recurrent and convolutional
# steps), with room: a state the model puts this far within the budget is not compiled
# (a compile is seconds on a large step, most of a budgeted search of a deep one).
MODEL_ERROR = 0.5


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
    updated: bool = False  # state the step returns updated (a weight, a moment), not data
    activation: bool = False  # constraints on activations (``activations``), not arguments
    image: Image | None = None  # a convolution's result (``convolution_result``)
    # spec -> the step of the state it was priced in, during the last pass over the group;
    # the search's best first, then the runner-up (``Search._report_order``)
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
    flops_limit: float | None = None
    # The chosen state's bytes per device as XLA compiled it (``Search.fit_compiled``),
    # and the bytes the model's were held to where a state compiled over ``budget``.
    compiled_memory: int | None = None
    model_budget: int | None = None


@dataclass
class _Compiles:
    """What ``Search.fit_compiled`` compiled: XLA's bytes per device of each state and
    of each program (states that propagate alike are one: ``Search._program``), and
    the descents it made once nothing was left to compile."""

    memory_of: Callable[[Outcome], int | None]
    states: dict[tuple, int] = field(default_factory=dict)
    programs: dict[tuple, int] = field(default_factory=dict)
    origins: set[tuple] = field(default_factory=set)  # descended from, each its own error
    descents: int = 0  # from the state least over the model's bytes held


class Search:
    def __init__(self, evaluator: Evaluator, groups: list[Group], axes: list[tuple[str, int]],
                 budget: int | None, *, max_evaluations: int = 160,
                 exhaustive_limit: int = 64, descent_width: int = 3,
                 descent_evaluations: int = 48, peak_scale: float | None = None):
        self.evaluate = evaluator
        self.groups = groups
        self.sizes = dict(axes)
        self.axes = list(axes)
        self.budget = budget
        self.max_evaluations = max_evaluations
        self.exhaustive_limit = exhaustive_limit
        self.descent_width = descent_width
        self.descent_evaluations = descent_evaluations
        # Where set, a state's memory under the budget is its quick live-range peak times
        # this, not the memory model's (``_estimate``): the search of a step with its
        # layers cut (``layers``) only proposes the states the full step judges.
        self.peak_scale = peak_scale
        self._priced: dict[tuple, StepTime] = {}
        # seconds, quick peak, order priced: the order ``ranked`` judges states in, one
        # order whatever the memory model has said of some of them since
        self._quick: dict[tuple, tuple[float, int, int]] = {}
        # the fewest operations per device of a textbook configuration (``_seed``)
        self._least_flops = math.inf
        # the least ratio of the memory model's bytes to the quick peak on a state it judged
        self._least_ratio: float | None = None
        self._estimated: set[tuple] = set()
        self._floors: dict[tuple, int] = {}  # a lower bound of each state's memory
        self._readers: dict[tuple, ModuleValues] = {}
        self._tried: list[dict[Spec, tuple]] = [{} for _ in groups]  # spec -> state key
        self._textbook: list[tuple] = []  # the textbook configurations' states (``_seed``)
        # FSDP x tensor parallel, its activations constrained: MaxText's state (``_seed``)
        self._expert_like: tuple | None = None
        self.refined: dict[int, Spec] | None = None  # the best of them refined (``_seed``)

    # -- pricing -------------------------------------------------------------

    @property
    def flops_limit(self) -> float:
        """The operations per device a state may take and still rank by its step."""
        return self._least_flops * (1 + FLOPS_SLACK)

    def score(self, step: StepTime) -> tuple[int, bool, float, int]:
        """Bytes over the budget, then operations over ``flops_limit``, then seconds,
        then memory (ties: the lighter)."""
        over = 0 if self.budget is None else max(0, step.memory_peak - self.budget)
        return over, step.flops > self.flops_limit, step.seconds, step.memory_peak

    def price(self, specs: dict[int, Spec]) -> tuple:
        """The key of the state where group ``g`` is closed to ``specs[g]``, others open,
        priced (its memory by the memory model only when ``ranked`` needs it)."""
        key = tuple(sorted(specs.items()))
        if key not in self._priced:
            found, reader = self.evaluate(self._assignment(key))
            self._priced[key] = found
            self._quick[key] = (found.seconds, found.memory_peak, len(self._quick))
            if self.budget is not None:
                self._floors[key] = self.evaluate.floor(reader)
            # The last few states' propagated values: what settles the groups left open.
            self._readers[key] = reader
            while len(self._readers) > 64:
                del self._readers[next(iter(self._readers))]
        return key

    def _assignment(self, key: tuple) -> dict:
        assignment = {}
        for g, spec in key:
            if spec is None:  # an activation left unconstrained
                continue
            sharding = tensor_sharding(self.evaluate.mesh, spec, self.sizes)
            for position in self.groups[g].positions:
                assignment[position] = sharding
        return assignment

    def _estimate(self, key: tuple) -> StepTime:
        """The state's step with its memory by the memory model (under a budget)."""
        if self.budget is not None and key not in self._estimated:
            step = self._priced[key]
            if self.peak_scale is not None:
                memory = int(step.memory_peak * self.peak_scale)
            else:
                reader = self._readers.get(key)
                if reader is None:  # propagating again costs less than keeping every state
                    _, reader = self.evaluate(self._assignment(key))
                memory = self.evaluate.memory(reader)
                ratio = memory / max(step.memory_peak, 1)
                if self._least_ratio is None or ratio < self._least_ratio:
                    self._least_ratio = ratio
            self._priced[key] = replace(step, memory_peak=memory, estimated=True)
            self._estimated.add(key)
        return self._priced[key]

    def _proposed(self, key: tuple) -> StepTime:
        """The state's step with its memory as a proposal judges it: the memory model's
        where it has run, else the quick live-range peak times the least ratio of the
        model's bytes to it on any state the model judged (``_least_ratio``)."""
        step = self._priced[key]
        if key in self._estimated:
            return step
        if self._least_ratio is None:  # a first state: every argument left to propagation
            open_step, reader = self.evaluate({})
            self._least_ratio = self.evaluate.memory(reader) / max(open_step.memory_peak, 1)
        return replace(step, memory_peak=int(step.memory_peak * self._least_ratio))

    def ranked(self, keys, count: int = 1, *, proposing: bool = False) -> list[tuple]:
        """``keys`` best first, the first ``count`` ranked by the full score.

        The memory model costs several propagations, so it runs only where it can
        change the order: in order of seconds (then quick peak), until ``count``
        states fit the budget (every later one is then no faster and no lighter in
        bytes over the budget than those). A state whose arguments and
        results alone exceed the budget (``Evaluator.floor``) is over it whatever the
        model says: it waits, judged only where fewer than ``count`` states fit (then
        bytes over the budget rank them).

        ``proposing``: the ranking only proposes which states to price next (the
        greedy pass's decisions over states with groups still open, the candidates a
        descent sweep tries), so a state over the budget by its quick peak times the
        least ratio of the model's bytes to it seen so far (``_proposed``) is taken
        as over by that much, unjudged; whole-state rankings (the seeds, a descent's
        moves, the outcome) judge every state they reach by the model. Under a
        budget that binds, every state faster than the first that fits had been
        judged by the model in each proposal, and every state of a proposal where
        none fits (0.1-0.2 CPU s each: most of a search without layers to cut)."""
        keys = list(dict.fromkeys(keys))
        if self.budget is None:
            return sorted(keys, key=lambda k: self.score(self._priced[k]))
        order = sorted(keys, key=self._quick.__getitem__)
        judged: list[tuple] = []
        over: list[tuple] = []  # over the budget by their floor, not judged yet
        fitting: list[float] = []
        steps: dict[tuple, StepTime] = {}
        proposing = proposing and self.peak_scale is None

        def judge(key: tuple) -> StepTime:
            if key not in steps:
                proposed = self._proposed(key) if proposing else None
                steps[key] = proposed if proposed is not None and (
                    proposed.memory_peak > self.budget) else self._estimate(key)
            return steps[key]

        def best_first(keys: list[tuple]) -> list[tuple]:
            return sorted(keys, key=lambda k: self.score(judge(k)))

        for i, key in enumerate(order):
            # An equally fast state is no lighter by the quick peak (the order's second
            # key) either: the model is not asked to break the tie.
            if len(fitting) >= count and self._priced[key].seconds >= fitting[count - 1] * (
                    1 - SAME_SECONDS):
                return best_first(judged) + over + order[i:]
            if key not in self._estimated and self._floors.get(key, 0) > self.budget:
                over.append(key)
                continue
            step = judge(key)
            judged.append(key)
            if step.memory_peak <= self.budget and step.flops <= self.flops_limit:
                fitting.append(step.seconds)
        if len(fitting) >= count:
            return best_first(judged) + over
        for key in over:
            judge(key)
        return best_first(judged + over)

    def best_of(self, tried: dict[Spec, tuple], *, proposing: bool = False) -> Spec:
        """The spec whose state ranks first (``ranked``)."""
        first = self.ranked(tried.values(), proposing=proposing)[0]
        return next(spec for spec, key in tried.items() if key == first)

    def settled(self, specs: dict[int, Spec], group: Group) -> Spec | None:
        """The spec propagation gave every member of ``group`` (open) in the state of
        ``specs``, when it gave them one with axes, the same for all; else None."""
        reader = self._readers.get(tuple(sorted(specs.items())))
        if reader is None:
            return None
        store = reader.store
        arguments = main_values(reader)[0]  # a propagated copy numbers its values anew
        found = set()
        for position in group.positions:
            slot = store.slot_of[arguments[position]]
            sharding = store.value[slot] if slot >= 0 else None
            found.add(spec_of(sharding, len(group.shape)) if sharding is not None else None)
        (spec,) = found if len(found) == 1 else (None,)
        if spec is None or not any(spec):
            return None
        return spec

    # -- the search ----------------------------------------------------------

    def run(self) -> Outcome:
        start = time.perf_counter()
        space = math.prod(len(g.candidates) for g in self.groups)
        exhaustive = space <= self.exhaustive_limit
        if exhaustive:
            self._exhaustive()
            self.state = {g: group.candidates[0] for g, group in enumerate(self.groups)}
            self._seed()  # the operations the textbook configurations need
        else:
            self._greedy()
            for origin in self._seed():
                self.state = dict(origin)
                self._descend(len(self._priced) + self.descent_evaluations)
        return self._outcome(start, exhaustive)

    def confirm(self, states: list[dict[int, Spec]]) -> Outcome:
        """The best of ``states`` (a spec per group) and the textbook configurations,
        each priced as a whole state: where the choices come from a search of the
        same step with its repeated layers cut (``layers``)."""
        start = time.perf_counter()
        for state in states:
            self.price(state)
        self.state = dict(states[0])
        self._seed(refine=False)  # the cut step's refined state is among ``states``
        # Each group's alternatives for the report: its spec in each priced state.
        for key in self.ranked(self._complete()):
            for g, spec in key:
                self._tried[g].setdefault(spec, key)
        return self._outcome(start, False)

    def best_states(self, count: int) -> list[dict[int, Spec]]:
        """The ``count`` best complete states priced, best first (``ranked``)."""
        complete = self._complete()
        return [dict(k) for k in self.ranked(complete, count)[:count]]

    def fit_compiled(self, outcome: Outcome, compiled_memory: Callable[[Outcome], int | None]
                     ) -> Outcome:
        """``outcome``, or the best state priced whose program XLA compiles within the
        budget (see the module doc): ``compiled_memory`` compiles an outcome's state
        and returns its bytes per device (None: it cannot be compiled here). Last, the
        textbook states that rank before the one kept but for their memory are
        compiled (``_textbook_ahead``): the state returned is no slower than any of
        them XLA fits in the budget, MaxText's FSDP x tensor parallel among them."""
        budget = self.budget
        if budget is None:
            return outcome
        searched = time.perf_counter()
        start = searched - outcome.seconds
        evaluations = outcome.evaluations  # a cut step's search's included (``confirm``)
        compiles = _Compiles(compiled_memory)
        compiled = compiles.states
        key = self._key(outcome)
        if outcome.step.memory_peak * (1 + MODEL_ERROR) <= budget:
            # Within the budget by more than the model's error: not compiled itself.
            ahead = self._textbook_ahead(key, True, compiled, budget)
            if not ahead:
                return outcome
            found = self._first_fitting(ahead, compiles, budget, start, outcome.exhaustive)
            outcome = self._outcome(start, outcome.exhaustive, key if found is None else found)
            outcome.compiled_memory = None if found is None else compiled[found]
            outcome.evaluations = evaluations
            return outcome
        complete = self._complete()
        textbook = None  # the textbook states within the budget by the model, best first
        beyond: list[tuple] = []  # and those the model may count long, fastest first
        fallbacks: set[tuple] = set()  # compiled as such, judged by the budget itself
        while True:
            memory = self._compile(key, outcome, compiles)
            if memory is None:  # XLA cannot compile it here: nor, likely, the others
                if not compiled:
                    return outcome
                break
            if memory <= budget or len(compiled) == len(complete):
                break
            if textbook is None:
                textbook, beyond = self._fallbacks(budget)
            tried = len(compiles.programs) >= COMPILED_TRIES and (
                time.perf_counter() - searched > searched - start)
            fallback = next((k for k in (beyond if tried else textbook)
                             if k not in compiled), None)
            # The next state not compiled yet, ranked as if the model were as short of
            # XLA on every state as on this one; a textbook configuration within the
            # budget by the model instead where that one is no faster, or where the
            # tries are spent: its error is its own (not the states' held above), so
            # a budget it meets is met no slower than it.
            self.budget = min(self.budget, int(budget * outcome.step.memory_peak / memory))
            if tried and fallback is None and len(compiles.origins) < COMPILED_TRIES:
                found = self._descend_from_compiled(compiles, budget)
                complete = self._complete()
                if found is not None:
                    key = found
                    outcome = self._outcome(start, outcome.exhaustive, key)
                    continue
            least = self.ranked(complete)[0] if tried and fallback is None else None
            descended = compiles.descents < COMPILED_TRIES and least is not None and (
                self._estimate(least).memory_peak > self.budget)
            if descended:
                compiles.descents += 1
                self._descend_from_least(least)
                complete = self._complete()
            key = next((k for k in self.ranked(complete, len(compiled) + 1)
                        if k not in compiled), None)
            if tried and fallback is None and not (descended and key is not None and (
                    self._estimate(key).memory_peak < self._estimate(least).memory_peak)):
                break
            if fallback is not None and (key is None or tried or self._priced[key].seconds >= (
                    self._priced[fallback].seconds * (1 - SAME_SECONDS))):
                key = fallback
                fallbacks.add(key)
            elif key is None:
                break
            outcome = self._outcome(start, outcome.exhaustive, key)
        best = min(compiled, key=lambda k: (max(0, compiled[k] - budget), list(compiled).index(k)))
        ahead = self._textbook_ahead(best, compiled[best] <= budget, compiled, budget)
        found = self._first_fitting(ahead, compiles, budget, start, outcome.exhaustive)
        if found is not None:
            best = found
            fallbacks.add(best)
        if best != key or ahead:
            outcome = self._outcome(start, outcome.exhaustive, best)
        outcome.compiled_memory = compiled[best]
        outcome.model_budget = self.budget if (
            self.budget != budget and best not in fallbacks) else None
        outcome.budget = budget
        outcome.evaluations = evaluations
        outcome.seconds = time.perf_counter() - start
        return outcome

    def _complete(self) -> list[tuple]:
        """The keys of the states priced with every group closed, in the order priced."""
        return [k for k in self._priced if len(k) == len(self.groups)]

    def _compile(self, key: tuple, outcome: Outcome, compiles: _Compiles) -> int | None:
        """XLA's bytes per device of state ``key`` (``outcome``), compiled once per
        program (``_program``: its twins take its bytes); None where it cannot be."""
        program = self._program(key)
        memory = compiles.programs.get(program)
        if memory is None:
            memory = compiles.memory_of(outcome)
            if memory is None:
                return None
            compiles.programs[program] = memory
        compiles.states[key] = memory
        return memory

    def _fallbacks(self, budget: int) -> tuple[list[tuple], list[tuple]]:
        """The compiled check's fallbacks: the textbook states within ``budget`` by the
        model, best first; and with them, fastest first, those over it by less than the
        model's error (it counts some states long: XLA reuses a buffer its walk keeps),
        compiled once the tries are spent, before the check gives up on the budget."""
        textbook = [k for k in self.ranked(self._textbook, len(self._textbook))
                    if self._estimate(k).memory_peak <= budget]
        beyond = sorted(textbook + [k for k in self._textbook if budget < (
            self._estimate(k).memory_peak) <= budget * (1 + MODEL_ERROR)],
            key=lambda k: self._priced[k].seconds)
        return textbook, beyond

    def _descend_from_compiled(self, compiles: _Compiles, budget: int) -> tuple | None:
        """Nothing left to compile: a descent from the compiled state XLA puts least over
        the budget (of those not descended from yet), under the model's bytes held to
        that state's own error (its neighbours share its buffers, so its error more than
        the others'). The state it ends in, to compile, where lighter by the model and
        not compiled yet; else None."""
        compiled = compiles.states
        origin = min((k for k in compiled if k not in compiles.origins),
                     key=compiled.__getitem__, default=None)
        if origin is None:
            return None
        compiles.origins.add(origin)
        found = self._descent_from(origin, int(
            budget * self._estimate(origin).memory_peak / compiled[origin]))
        return found if found is not None and found not in compiled else None

    def _descend_from_least(self, least: tuple) -> None:
        """Nothing left to compile, and no state priced within the model's bytes held
        (the search stopped at the first within the budget itself): a descent from
        ``least``, the state least over them, under the bytes held, prices lighter
        states; the best it finds is compiled past the tries where it is lighter than
        ``least``."""
        self.state = dict(least)
        self._descend(len(self._priced) + self.descent_evaluations)

    def _textbook_ahead(self, kept: tuple, fits: bool, compiled: dict[tuple, int],
                        budget: int) -> list[tuple]:
        """The textbook states (``_seed``) not ``compiled`` yet, within the model's error
        of ``budget``, that rank before ``kept`` but for their memory (fewer operations
        over ``flops_limit``, then faster; MaxText's FSDP x tensor parallel state by its
        step alone: its operations are the expert's), best first; all of them where
        ``kept`` does not ``fits`` the budget as compiled.

        The model counts some states long (XLA reusing a buffer its walk keeps): a
        budget set to an expert's memory as XLA compiles it, MaxText's state, has the
        model put that state over it, and the check had kept a slower state (1.02x
        the expert's step on a DiT with adaLN modulation, 4x2)."""
        def rank(k: tuple) -> tuple[bool, float]:
            step = self._priced[k]
            return step.flops > self.flops_limit, step.seconds

        def before(k: tuple) -> bool:
            faster = self._priced[k].seconds < self._priced[kept].seconds * (1 - SAME_SECONDS)
            if k == self._expert_like:
                return faster
            return rank(k)[0] < rank(kept)[0] or (rank(k)[0] == rank(kept)[0] and faster)

        ahead = [k for k in self._textbook if k not in compiled and (not fits or before(k))]
        return sorted((k for k in ahead if self._estimate(k).memory_peak <= (
            budget * (1 + MODEL_ERROR))), key=rank)

    def _first_fitting(self, keys: list[tuple], compiles: _Compiles, budget: int,
                       start: float, exhaustive: bool) -> tuple | None:
        """The first of ``keys`` XLA compiles within ``budget``, compiled in turn; None."""
        for key in keys:
            memory = self._compile(key, self._outcome(start, exhaustive, key), compiles)
            if memory is not None and memory <= budget:
                return key
        return None

    def _descent_from(self, origin: tuple, held: int) -> tuple | None:
        """The state a descent from ``origin`` under ``held`` model bytes ends in, where
        not ``origin`` and lighter than it by the model; else None."""
        budget, self.budget = self.budget, held
        self.state = dict(origin)
        try:
            self._descend(len(self._priced) + self.descent_evaluations)
        finally:
            self.budget = budget
        key = tuple(sorted(self.state.items()))
        if key == origin or self._estimate(key).memory_peak >= (
                self._estimate(origin).memory_peak):
            return None
        return key

    def _key(self, outcome: Outcome) -> tuple:
        return tuple(sorted((g, group.chosen) for g, group in enumerate(outcome.groups)))

    def _program(self, key: tuple) -> tuple:
        """What the program of the complete state ``key`` is: every value's propagated
        axes and the ops propagation erased, the same for a twin whose activation
        constraint is closed where the other's is left open to the axes propagation
        fills (the program returned carries the propagated shardings); the key itself
        where the state propagated on a copy of its own (a graph numbered anew)."""
        reader = self._readers.get(key)
        if reader is None:
            _, reader = self.evaluate(self._assignment(key))
        if self.evaluate.signature(reader) is None:
            return key
        return (tuple(reader.axes(v) for v in range(len(reader.graph.values))),
                tuple(reader.store.erase_log))

    def _outcome(self, start: float, exhaustive: bool, key: tuple | None = None) -> Outcome:
        complete = self._complete()
        if key is None:
            key = self.ranked(complete)[0]
        reader = self._readers.get(key)
        if reader is None:
            _, reader = self.evaluate(self._assignment(key))
        for g, spec in key:
            self.groups[g].chosen = spec
        for group, tried in zip(self.groups, self._tried):
            order = self._report_order(tried)
            group.tried = {spec: self._priced[tried[spec]] for spec in order}
        return Outcome(self.groups, _result_specs(reader), self._estimate(key),
                       len(self._priced), time.perf_counter() - start, exhaustive, self.budget,
                       self.flops_limit)

    def _report_order(self, tried: dict[Spec, tuple]) -> list[Spec]:
        """The specs of a group's last pass, its best first, then the others as the
        report's runner-up is read from them: those not known to exceed the budget
        by seconds, then those that do by bytes over it.

        The runner-up needs the memory model only where it was faster than the best
        (its memory is then why it lost): a slower one lost on time, whatever its
        memory, so it is not judged (its figure stays the quick peak). Judging
        every group's runner-up in full was most of a budgeted search's memory
        estimates (22 of 27 on the 32-layer MLP)."""
        if not tried:  # settled by propagation, never priced
            return []
        ranked = self.ranked(tried.values())
        best = ranked[0]

        def known_over(key: tuple) -> bool:
            if self.budget is None:
                return False
            if key in self._estimated:
                return self._priced[key].memory_peak > self.budget
            return self._floors.get(key, 0) > self.budget

        others = sorted((k for k in dict.fromkeys(ranked) if k != best), key=lambda k: (
            known_over(k), self.score(self._priced[k]) if known_over(k) else
            (0, self._priced[k].seconds, self._priced[k].memory_peak)))
        if others and self._priced[others[0]].seconds < self._priced[best].seconds:
            self._estimate(others[0])
        by_key: dict[tuple, list[Spec]] = {}
        for spec, key in tried.items():
            by_key.setdefault(key, []).append(spec)
        return [spec for key in [best, *others] for spec in by_key[key]]

    def _exhaustive(self) -> None:
        combos = _product([g.candidates for g in self.groups])
        keys = [self.price(dict(enumerate(combo))) for combo in combos]
        for g in range(len(self.groups)):
            for spec in self.groups[g].candidates:
                # the best state with that choice
                with_it = [k for k, combo in zip(keys, combos) if combo[g] == spec]
                self._tried[g][spec] = self.ranked(with_it)[0]

    def _greedy(self) -> None:
        # Activations start unconstrained: the seeds and the descent constrain them.
        unconstrained = {g: None for g, group in enumerate(self.groups) if group.activation}
        decided: dict[int, Spec | None] = dict(unconstrained)
        order = sorted((g for g, group in enumerate(self.groups) if not group.activation),
                       key=lambda g: -self.groups[g].bytes)
        # The first decision is the best single move of any group (the others open): the
        # one the rest settles around. By bytes alone a weight would go first and
        # propagation would shard the model around it, never finding that the batch
        # alone sharded (weights replicated) is cheaper on a small model.
        for g in order:
            self._tried[g] = {spec: self.price({**unconstrained, g: spec})
                              for spec in self.groups[g].candidates}
        opening = self.ranked([k for tried in self._tried for k in tried.values()],
                              proposing=True)[0]
        first = opening[0][0]
        order.remove(first)
        order.insert(0, first)
        for g in order:
            if g in decided:
                continue
            tried = self._tried[g] = {spec: self.price({**decided, g: spec})
                                      for spec in self.groups[g].candidates}
            decided[g] = self.best_of(tried, proposing=True)
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

    def _seed(self, refine: bool = True) -> list[tuple]:
        """Price the textbook configurations (``candidates.structured_seeds``) as whole
        states, and the best of them refined (``_refine``; ``refined``): where the
        descent starts, beside the greedy state. It starts from
        the best of them, and from the fastest when that one exceeds the budget (a
        few moves may bring it under)."""
        weights = [g for g, group in enumerate(self.groups) if not group.activation]
        activations = [g for g, group in enumerate(self.groups) if group.activation]
        updated = [self.groups[g].updated for g in weights]
        shapes = [self.groups[g].shape for g in weights]
        reader = self.evaluate.reader()
        windows = [window_dims(reader, self.evaluate.value_at(self.groups[g].positions[0]))
                   for g in weights]
        width = model_width(shapes, updated, windows)
        weight_values = frozenset(self.evaluate.value_at(p) for g in weights
                                  if self.groups[g].updated for p in self.groups[g].positions)
        roles = [weight_roles(reader, self.evaluate.value_at(self.groups[g].positions[0]), width,
                              weight_values) for g in weights]
        seeds = structured_seeds(shapes, updated, self.axes, roles, windows)
        residual = {g: is_residual(reader, self.evaluate.value_at(self.groups[g].positions[0]))
                    for g in activations}
        projections = {g for g in activations if projects_weight(
            reader, self.evaluate.value_at(self.groups[g].positions[0]), weight_values)
            or starts_stream(reader, self.evaluate.value_at(self.groups[g].positions[0]))}
        keys = []
        for (_name, specs), (_, fsdp, tensor) in zip(seeds, CONFIGURATIONS):
            state = {}
            for g, spec in zip(weights, specs):
                if spec not in self.groups[g].candidates:  # several data axes beside model
                    self.groups[g].candidates.append(spec)
                state[g] = spec
            # Each configuration as written, and with its activations constrained.
            for constrained in (False, True)[:1 + bool(activations)]:
                for g in activations:
                    group = self.groups[g]
                    spec = activation_seed(group.shape, self.axes, tensor, residual[g],
                                           group.image) if (
                        constrained and g in projections) else None
                    if spec not in group.candidates:
                        group.candidates.append(spec)
                    state[g] = spec
                keys.append(self.price(dict(state)))
            if fsdp and tensor:
                self._expert_like = keys[-1]
        if keys:
            self._least_flops = min(self._priced[k].flops for k in keys)
            if refine:
                self.refined = dict(self._refine(self.ranked(keys)[0]))
                keys.append(self.price(self.refined))
        self._textbook = list(dict.fromkeys(keys))
        keys.append(self.price(self.state))
        best = self.ranked(keys)[0]
        fastest = min(keys, key=lambda k: self._priced[k].seconds)
        return [best] if self._priced[fastest].seconds >= self._priced[best].seconds else [
            best, fastest]

    def _refine(self, key: tuple) -> tuple:
        """The textbook state ``key`` with the weights' axes a model prices as a loss taken
        off: per weight group, its spec with one of its mesh axes removed, the move kept
        where the state's modelled step is faster and it stays within the budget (the
        score, ``score``, ranks it first); sweeps until none is kept.

        The textbook configurations split every weight by its roles alone, where a
        split may cost more than it saves (a low-rank factor or a router the roles
        did not tell, a small table): each such weight is one move from them, a move
        the descent from the best state, often another, never makes."""
        state = dict(key)
        moved = True
        while moved:
            moved = False
            for g, group in enumerate(self.groups):
                spec = state[g]
                if not group.updated or spec is None:
                    continue
                for used in dict.fromkeys(a for dim in spec for a in dim):
                    fewer = tuple(tuple(a for a in dim if a != used) for dim in spec)
                    if fewer not in group.candidates:
                        group.candidates.append(fewer)
                    move = self.price({**state, g: fewer})
                    if self._priced[move].seconds < self._priced[key].seconds * (
                            1 - SAME_SECONDS) and self.score(self._estimate(move)) < self.score(
                            self._estimate(key)):
                        state[g], key, moved = fewer, move, True
                        break
        return key

    def _descend(self, limit: int) -> None:
        """Sweeps of single-group moves from ``self.state`` until none improves it or
        ``limit`` states in all have been priced."""
        limit = max(limit, self.max_evaluations)
        moved = True
        while moved and len(self._priced) < limit:
            moved = False
            for g, group in enumerate(self.groups):
                current = self.state[g]
                tried = {current: self.price(self.state)}
                # The candidates the last pass over the group ranked best: the others
                # were far behind in a state that differs from this one in a few groups.
                ranked = self.ranked(self._tried[g].values(), proposing=True)
                specs = [spec for k in ranked[:self.descent_width]
                         for spec in self._tried[g] if self._tried[g][spec] == k]
                for spec in specs or group.candidates:
                    if len(self._priced) >= limit:
                        break
                    tried[spec] = self.price({**self.state, g: spec})
                if len(tried) > 1:  # else the greedy pass's prices say more
                    self._tried[g] = tried
                best = self.best_of(tried)
                if self.score(self._estimate(tried[best])) < self.score(
                        self._estimate(tried[current])):
                    self.state[g] = best
                    moved = True


def _product(lists: list[list[Spec]]) -> list[tuple[Spec, ...]]:
    combos: list[tuple[Spec, ...]] = [()]
    for options in lists:
        combos = [c + (o,) for c in combos for o in options]
    return combos


def _result_specs(reader: ModuleValues) -> list[Spec | None]:
    """The main function's result shardings in ``reader``, as specs (None: a sub-axis)."""
    store = reader.store
    return [spec_of(store.value[slot], store.rank[slot])
            for slot in store.func_results[main_function(reader)]]


def make_groups(evaluator: Evaluator, positions: list[int], names: list[str],
                axes: list[tuple[str, int]], structure: list[list[int]], *,
                activation: bool = False) -> list[Group]:
    """One ``Group`` per structure group (indices into ``positions``: evaluator
    positions, ``Evaluator.value_at``'s; of marks, activation groups)."""
    reader = evaluator.reader()
    graph = reader.graph
    # An argument of the type of a result is state the step returns updated.
    results = {graph.value_type_key[v] for v in evaluator.results}
    groups = []
    for members in structure:
        value = evaluator.value_at(positions[members[0]])
        shape = graph.value_shape[value] or ()
        element = evaluator.element_bytes(value)
        image = convolution_result(reader, value) if activation else None
        options = activation_candidates(shape, axes, image) if activation else candidates(
            shape, axes, window_dims(reader, value))
        groups.append(Group([positions[m] for m in members], [names[m] for m in members],
                            tuple(shape), element, options, activation=activation, image=image,
                            updated=not activation and graph.value_type_key[value] in results))
    return groups


__all__ = ["Group", "Outcome", "Search", "candidates", "make_groups"]
