"""User-priority propagation: priorities become rounds.

Before the first round every sharding is *initialised*: dimensions with a
priority above 0 become closed and empty and their axes join the tensor's
replicated list (so nothing can use them yet); explicit ``p0`` is dropped.
Each later round restores, on every sharding that referenced that priority,
exactly the dimensions whose original priority it is, then runs op-priority
propagation again. Afterwards no priority survives on anything rewritten.
"""

from __future__ import annotations

from collections.abc import Callable

from shardc.compiler.propagation.driver import Driver
from shardc.compiler.propagation.ir_access import ShardingStore
from shardc.compiler.sharding.tensor import DimSharding, TensorSharding


def initialised(sharding: TensorSharding, order: dict[str, int]) -> TensorSharding:
    """Close and empty dims of priority > 0, moving their axes to replicated."""
    dims = []
    replicated = list(sharding.replicated)
    for dim in sharding.dims:
        if not dim.priority:
            dims.append(DimSharding(dim.axes, dim.closed))
        else:
            replicated.extend(dim.axes)
            dims.append(DimSharding((), True))
    replicated.sort(key=lambda a: (order.get(a[0], len(order)), a[0], a[1], a[2]))
    return sharding._replace(dims=tuple(dims), replicated=tuple(replicated))


def restored(current: TensorSharding, original: TensorSharding, priority: int) -> TensorSharding:
    """Give back the dims whose original priority is ``priority`` (without it)."""
    dims = list(current.dims)
    removed = set()
    for d, dim in enumerate(original.dims):
        if (dim.priority or 0) == priority:
            dims[d] = DimSharding(dim.axes, dim.closed)
            removed.update(dim.axes)
    replicated = tuple(a for a in current.replicated if a not in removed)
    return current._replace(dims=tuple(dims), replicated=replicated)


def user_priority_propagate(driver: Driver, rounds: Callable[[Driver], None]) -> None:
    """Initialise, run ``rounds`` (op-priority propagation), then one call per priority."""
    store = driver.store
    trace = driver.trace
    if trace is not None:
        trace.phase("init", None)
    references = initialise(store, sorted(live_slots(store)))
    rounds(driver)
    for priority in sorted(references):
        if trace is not None:
            trace.phase("restore", priority)
        restore(store, references[priority], priority)
        rounds(driver)


def live_slots(store: ShardingStore) -> set[int]:
    """The slots the priorities of a run are read from: every value's and function result's."""
    live = {slot for slot in store.slot_of if slot >= 0}
    for slots in store.func_results.values():
        live.update(slots)
    return live


def initialise(store: ShardingStore, slots: list[int]
               ) -> dict[int, list[tuple[int, TensorSharding]]]:
    """Initialise the shardings of ``slots`` (``initialised``), in that order; by
    priority, the slots that referenced it and their shardings before."""
    references: dict[int, list[tuple[int, TensorSharding]]] = {}
    # sharding id -> (priorities, initialised sharding or None when unchanged)
    seen: dict[int, tuple[set[int], TensorSharding | None]] = {}
    for slot in slots:
        sharding = store.value[slot]
        if sharding is None:
            continue
        known = seen.get(store.sid[slot])
        if known is None:
            mesh = store.meshes.get(sharding.mesh)
            new = initialised(sharding, mesh.order if mesh else {})
            known = seen[store.sid[slot]] = (
                {d.priority for d in sharding.dims if d.priority},
                None if new == sharding else new)
        for priority in known[0]:
            references.setdefault(priority, []).append((slot, sharding))
        if known[1] is not None:
            store.set_slot(slot, known[1])
    return references


def restore(store: ShardingStore, references: list[tuple[int, TensorSharding]],
            priority: int) -> None:
    """Give each referencing slot back the dims of ``priority`` (``restored``)."""
    for slot, original in references:
        new = restored(store.value[slot], original, priority)
        if new != store.value[slot]:
            store.set_slot(slot, new)
