"""Sharding groups: values that must end up with the same sharding.

``sharding_groups`` reads every ``sdy.sharding_group`` op into a map from a
value (its sharding's storage) to all members of its group, in the order of
the group ops, and syncs the members once: the first member sharding that is
present and not fully open and empty is copied to every member, provided all
such shardings agree. When members disagree, ``split_conflicts`` does what
Shardy does: it warns and puts a fully open ``sdy.sharding_constraint`` right
after every member, redirecting the member's uses (the group op included) to
it, so the constraints become the group; the caller then rebuilds the graph.
"""

from __future__ import annotations

from jaxlib.mlir import ir

from shardc.compiler.diagnostics import emit_warning
from shardc.compiler.propagation.graph import PropagationGraph
from shardc.compiler.propagation.ir_access import ShardingStore
from shardc.compiler.sharding.tensor import TensorSharding
from shardc.dialects import sdy


def _is_open_empty(sharding: TensorSharding) -> bool:
    # Replicated axes do not count: Shardy only looks at the dimensions.
    return all(not d.closed and not d.axes for d in sharding.dims)


def _members_by_group(
    graph: PropagationGraph, store: ShardingStore, *, unique: bool = True
) -> dict[int, list[int]]:
    by_id: dict[int, list[int]] = {}
    for op, name in enumerate(graph.op_name):
        if name != "sdy.sharding_group":
            continue
        group = ir.IntegerAttr(graph.ops[op].attributes["group_id"]).value
        value = store.storage[graph.op_operands[op][0]]
        members = by_id.setdefault(group, [])
        if not unique or value not in members:
            members.append(value)
    return by_id


def _conflicting(shardings: list[TensorSharding | None]) -> list[TensorSharding]:
    chosen = [s for s in shardings if s is not None and not _is_open_empty(s)]
    return chosen if chosen and any(s != chosen[0] for s in chosen) else []


def split_conflicts(graph: PropagationGraph, store: ShardingStore) -> bool:
    """Give conflicting groups open constraints as members; return whether IR changed."""
    changed = False
    for group, members in _members_by_group(graph, store, unique=False).items():
        chosen = _conflicting([store.get(v) for v in members])
        if not chosen:
            continue
        emit_warning(graph.ops[graph.value_owner[members[0]]],
                     f"The initial operand shardings on the sharding group {group} do not "
                     "match. Inserting an open sharding constraint to all constrained values.")
        for member in members:
            value = graph.values[member]
            rank = graph.value_rank(member)
            text = "#sdy.sharding<@" + chosen[0].mesh + ", [" + ", ".join(["{?}"] * rank) + "]>"
            attr = ir.Attribute.parse(text, graph.module.context)
            if graph.value_def[member] >= 0:
                point = ir.InsertionPoint.after(graph.ops[graph.value_def[member]])
            else:
                point = ir.InsertionPoint.at_block_begin(value.owner)
            constraint = sdy.ShardingConstraintOp(value, attr, ip=point, loc=value.location)
            value.replace_all_uses_except(constraint.result, constraint.operation)
            changed = True
    return changed


def sharding_groups(graph: PropagationGraph, store: ShardingStore) -> dict[int, list[int]]:
    """Map each grouped value to its group's members, after the initial sync."""
    by_id = _members_by_group(graph, store)
    groups: dict[int, list[int]] = {}
    for group, members in by_id.items():
        shardings = [store.get(v) for v in members]
        chosen = [s for s in shardings if s is not None and not _is_open_empty(s)]
        if chosen and not _conflicting(shardings):
            for value, sharding in zip(members, shardings):
                slot = store.slot_of[value]
                if slot >= 0 and sharding != chosen[0]:
                    store.set_slot(slot, chosen[0])
        for value in members:
            groups[value] = members
    return groups
