"""Shardy-compatible sharding propagation in pure Python.

``propagate(module, plan=...)`` is the entry point other code calls
without the pass machinery. It builds the compact graph once
(``graph.PropagationGraph``), reads every sharding once
(``ir_access.ShardingStore``), runs the chosen *plan* on the driver
(``driver.Driver``: Shardy's worklist, one step per op) and writes all
changes back once (``propagate_read`` also hands back that graph and store,
for a caller that reads the result). Plans:

=======================  ====================================================
``basic``                one run with basic factor propagation
``aggressive``           one run with aggressive factor propagation
``basic-then-aggressive``  a basic run, then an aggressive run
``op-priority``          five aggressive runs, heuristics h0..h4 (directions.py)
``user-priority``        priority rounds, each an op-priority plan
=======================  ====================================================

Re-propagation (``incremental.py``): ``SharedRead(module).recorded(plan, starts)``
propagates once and records the run; its ``repropagate(other_starts)`` gives the
store ``SharedRead.propagate(plan, other_starts)`` would, computing again only the
steps the differing starts reach (one changed sharding in a deep model: a few
percent of the steps)::

    base = SharedRead(module).recorded("user-priority", {})
    store = base.repropagate({op: attribute})   # op's result started from attribute

Sharding origins (Shardy's ``debug-sharding-origins``, ``origins.py``):
``propagate(..., debug_sharding_origins=True)`` writes the attributes the
native passes write (``sdy.sharding_origins`` on func argument/result dicts,
``sdy.sharding_constraint``/``sdy.data_flow_edge`` ops as a dictionary and on
other ops as an array with one dictionary per result; ``sdy.sharding_origin_name``
on constraints and manual computations). ``propagate(..., record_origins=True)``
returns a ``ShardingOrigins`` instead of None, with no attribute to parse::

    origins = propagate(module, plan="basic", record_origins=True)
    origins.args[0]        # main func argument 0: {"x": "self", "y": ("output", 0)}
    origins.results[0]     # main func result 0
    origins.funcs["f"].args[1]
    origins.of_op(op, 0)   # result 0 of an ir.Operation (or origins.ops[(op, 0)])

Each maps an axis key (``"x"``, or ``"x:(1)2"`` for a sub-axis) to
``"self"`` (the value's own user sharding), ``("input", n)`` (func argument
n), ``("output", n)`` (func result n), ``("constraint", "constraint_k")``
(the k-th ``sdy.sharding_constraint`` in program order) or
``("manual_input"|"manual_output", "mc_k", n)`` (the k-th manual
computation's in/out sharding n). Exactly the values Shardy annotates appear;
both forms come from one computation, so they always agree. Recording only
reads shardings after each step: results and the step memo are unchanged.
"""

from __future__ import annotations

from collections.abc import Callable, Collection

from jaxlib.mlir import ir

from shardc.compiler.diagnostics import PassError
from shardc.compiler.propagation.collection import cyclic_gc_paused
from shardc.compiler.propagation.directions import OP_PRIORITY_CHAIN, propagate_any
from shardc.compiler.propagation.driver import Driver
from shardc.compiler.propagation.factor_propagation import (
    aggressive_factor_propagation,
    basic_factor_propagation,
)
from shardc.compiler.propagation.graph import PropagationGraph, ReadMemo
from shardc.compiler.propagation.groups import sharding_groups, split_conflicts
from shardc.compiler.propagation.incremental import Propagation, Recorder, start_slots
from shardc.compiler.propagation.ir_access import ShardingStore
from shardc.compiler.propagation.origins import OriginRecorder, ShardingOrigins
from shardc.compiler.propagation.user_priority import user_priority_propagate


def _basic(driver: Driver) -> None:
    driver.propagate(basic_factor_propagation, propagate_any)


def _aggressive(driver: Driver) -> None:
    driver.propagate(aggressive_factor_propagation, propagate_any)


def _basic_then_aggressive(driver: Driver) -> None:
    _basic(driver)
    _aggressive(driver)


def _op_priority(driver: Driver) -> None:
    # Built once (with the chain), so the driver's direction caches survive rounds.
    for direction in OP_PRIORITY_CHAIN.functions:
        driver.propagate(aggressive_factor_propagation, direction)


def _user_priority(driver: Driver) -> None:
    user_priority_propagate(driver, _op_priority)


PLANS: dict[str, Callable[[Driver], None]] = {
    "basic": _basic,
    "aggressive": _aggressive,
    "basic-then-aggressive": _basic_then_aggressive,
    "op-priority": _op_priority,
    "user-priority": _user_priority,
}


def _check_shapes(graph: PropagationGraph) -> None:
    if graph.dynamic_values:
        value = graph.dynamic_values[0]
        owner = graph.ops[graph.value_owner[value]]
        raise PassError(owner, "Shardy propagation only supports ranked tensors with a "
                        f"static shape. type: {graph.values[value].type}")


def propagate(
    module: ir.Operation | ir.Module,
    *,
    plan: str = "basic",
    conservative: bool = False,
    keep_sharding_rules: bool = False,
    debug_sharding_origins: bool = False,
    record_origins: bool = False,
) -> ShardingOrigins | None:
    """Propagate shardings through ``module`` in place, as Shardy's pass would.

    ``debug_sharding_origins`` writes Shardy's origin attributes;
    ``record_origins`` returns them as a ``ShardingOrigins`` (else None).
    """
    _check_plan(plan)
    with cyclic_gc_paused():
        # Only the origins outlive the pause: a graph and store still referenced
        # when collection resumes would be scanned by the first collection.
        origins = _propagate(module.operation, plan, conservative, keep_sharding_rules,
                             debug_sharding_origins, record_origins)[2]
    return origins if record_origins else None


def propagate_read(
    module: ir.Operation | ir.Module,
    *,
    plan: str = "basic",
    conservative: bool = False,
    keep_sharding_rules: bool = False,
    memo: ReadMemo | None = None,
    write: bool = True,
) -> tuple[PropagationGraph, ShardingStore]:
    """``propagate``, handing back the graph and store it ran on, as written back.

    They hold what reading the module again would build, so a caller that
    reads the result spares that second read, except in two places: erased
    ops keep their indices (marked in ``graph.erased``) and a manual
    computation's in-shardings stay in ``store.manual`` as first read.
    ``memo`` carries what reading repeats across copies of one module
    (``graph.ReadMemo``). With ``write=False`` nothing is written back: the
    module is left as it was and the result is only in the graph and store
    (``store.write_back`` writes it later).
    """
    _check_plan(plan)
    with cyclic_gc_paused():
        graph, store, _ = _propagate(module.operation, plan, conservative, keep_sharding_rules,
                                     memo=memo, write=write)
    return graph, store


def _check_plan(plan: str) -> None:
    if plan not in PLANS:
        raise ValueError(f"unknown propagation plan '{plan}'; known: {sorted(PLANS)}")


class SharedRead:
    """One module read once, then propagated from many starting shardings.

    The cost-aware search propagates many copies of one module that differ
    only in the ``sdy.sharding`` of a few ops (its pins): the same ops,
    values and rules. ``SharedRead(module)`` builds the graph and reads the
    store of ``module`` once; ``propagate`` runs a plan from the store as
    read with some ops' starting shardings replaced, on a copy of the store,
    reusing the graph and the first run's plans and factor directions
    (``Driver(after=...)``), and writes nothing to the module. The result
    is the graph and store a copy of ``module`` carrying those shardings
    would have been propagated to.

    That holds only where no propagation can change the graph: ``usable``
    is False for a module with a trivially dead op (the driver erases it,
    changing the uses later runs would start from), a sharding group (a
    conflict in it inserts constraints into the IR) or a manual computation
    (a reader reads its in-shardings from the IR again); the caller then
    propagates copies instead.
    """

    def __init__(self, module: ir.Operation | ir.Module, *, conservative: bool = False,
                 memo: ReadMemo | None = None, graph: PropagationGraph | None = None):
        if graph is None:  # else ``module``'s, as its maker knows it (``regions.region_graph``)
            graph = PropagationGraph(module.operation, conservative=conservative, memo=memo)
        _check_shapes(graph)
        self.graph = graph
        self.store = ShardingStore(graph)  # as read: copied, never propagated itself
        self.usable = (not self.store.manual and "sdy.sharding_group" not in graph.op_name
                       and not any(map(graph.is_trivially_dead, range(len(graph.ops)))))
        self.runs = 0
        self._first: Driver | None = None  # the first run's, whose plans later runs reuse
        self._rules_to_attach: bool | None = None
        # ``ModuleValues.facts`` of the readers of its propagations: one module, never written.
        self.facts: dict = {}

    def rules_to_attach(self) -> bool:
        """``graph.rules_to_attach()`` after a run: the same for every run, since every
        run computes the rules of the same ops (none is erased), the first run all of them."""
        if self._rules_to_attach is None:
            self._rules_to_attach = self.graph.rules_to_attach()
        return self._rules_to_attach

    @property
    def first(self) -> Driver | None:
        """The first reusable run's driver, whose plans and caches later runs reuse."""
        return self._first

    def propagate(self, plan: str, starts: dict[int, ir.Attribute],
                  unsharded: tuple[Collection[int], Collection[int]] = ((), ())
                  ) -> ShardingStore | None:
        """The store of a ``plan`` propagation from the module's shardings, but op ``op``'s
        read from ``starts[op]`` (an ``sdy.sharding`` per-value attribute) instead of its
        own, and the arguments and results of its function at the positions of
        ``unsharded`` read without one; None where a start is not read that way
        (``ShardingStore.start``, ``ShardingStore.start_unsharded``)."""
        driver = self._run(plan, starts, unsharded, record=False)
        return None if driver is None else driver.store

    def recorded(self, plan: str, starts: dict[int, ir.Attribute],
                 unsharded: tuple[Collection[int], Collection[int]] = ((), ())
                 ) -> Propagation | None:
        """``propagate``, recorded: a ``Propagation`` whose ``store`` is that run's result
        and whose ``repropagate`` gives the runs from other starts, re-propagating only
        what their difference reaches (``incremental``); None where ``propagate`` is."""
        driver = self._run(plan, starts, unsharded, record=True)
        if driver is None:
            return None
        slots = start_slots(self.store, starts, unsharded)
        return Propagation(self, plan, starts, unsharded, driver, driver.trace, slots)

    def _run(self, plan: str, starts: dict[int, ir.Attribute],
             unsharded: tuple[Collection[int], Collection[int]], record: bool) -> Driver | None:
        _check_plan(plan)
        if not self.usable:
            raise ValueError("this module's propagations can change its graph: "
                             "propagate copies of it")
        store = self.store.fresh_copy(
            None if self._first is None else self._first.store.readers)
        for op, attribute in starts.items():
            if not store.start(op, attribute):
                return None
        if (unsharded[0] or unsharded[1]) and not store.start_unsharded(*unsharded):
            return None
        with cyclic_gc_paused():
            # No sharding groups (``usable``): none to sync or split.
            driver = Driver(self.graph, store, {}, after=self._first)
            if record:
                driver.trace = Recorder(store)
            PLANS[plan](driver)
            if record:
                driver.trace.finish()
        self.runs += 1
        if self._first is None and driver.reusable():
            self._first = driver
        return driver


def _propagate(operation: ir.Operation, plan: str, conservative: bool,
               keep_sharding_rules: bool, write_origins: bool = False,
               record_origins: bool = False, memo: ReadMemo | None = None,
               write: bool = True
               ) -> tuple[PropagationGraph, ShardingStore, ShardingOrigins | None]:
    graph = PropagationGraph(operation, conservative=conservative, memo=memo)
    _check_shapes(graph)
    store = ShardingStore(graph)
    tracking = write_origins or record_origins
    # Shardy numbers constraints before it splits conflicting groups (whose
    # inserted constraints get no origin name).
    constraints = {hash(graph.ops[op]) for op, name in enumerate(graph.op_name)
                   if name == "sdy.sharding_constraint"} if tracking else None
    if split_conflicts(graph, store):
        graph = PropagationGraph(operation, conservative=conservative, memo=graph.memo)
        store = ShardingStore(graph)
    driver = Driver(graph, store, sharding_groups(graph, store))
    if tracking:
        driver.recorder = OriginRecorder(graph, store, constraints)
    PLANS[plan](driver)
    if write:
        store.write_back(keep_rules=keep_sharding_rules)
    origins = driver.recorder.finish(write=write_origins) if tracking else None
    return graph, store, origins


__all__ = ["PLANS", "Propagation", "ShardingOrigins", "SharedRead", "cyclic_gc_paused", "propagate",
           "propagate_read"]
