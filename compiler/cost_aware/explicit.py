"""Export the resolved conflicts as explicit ``sdy.reshard`` ops.

XLA's dot handler has its own heuristics for operands that disagree with a
dot's result (``docs/cost-model.md``); the cost model prices the reshards
``op_comm`` chooses. So that XLA compiles exactly what was costed, every op
whose shardings the cost-aware search changed gets an ``sdy.reshard`` of
each operand to the sharding the op needs (``op_comm.required_sharding``):
XLA then sees compatible operands and only lowers plain reshards (and the
all-reduce of a sharded reduction factor).

XLA's own Shardy import keeps only function boundaries and constraints of the
module it is given and propagates again from them: an op's ``sdy.sharding``
does not reach it. Shardy's choices survive that because XLA re-derives them
from the same seeds; the search's do not, so each changed op's results are
also constrained (closed) to the sharding the search decided. Those are other
seeds than the search's pins, and Shardy's propagation is global, so XLA could
still re-derive an op the search left as it was otherwise: the module is also
marked (``xla_form.keep_op_shardings``) for XLA's copy to constrain every op.
"""

from __future__ import annotations

from jaxlib.mlir import ir

from shardc.compiler.cost_aware.candidates import (
    communication_needs,
    op_tags,
    same_mesh,
    tag_of,
    tagged_ops,
)
from shardc.compiler.propagation.graph import PropagationGraph, ReadMemo
from shardc.compiler.propagation.ir_access import ShardingStore
from shardc.compiler.propagation.values import ModuleValues
from shardc.compiler.sharding.tensor import DimSharding, TensorSharding, format_sharding
from shardc.dialects import sdy
from shardc.dialects.sdy import SHARDING_ATTR


def signature(reader: ModuleValues, op: int,
              axes: dict[int, tuple | None] | None = None) -> tuple:
    """The dimension axes of every operand and result of ``op`` (what decides its comm).

    ``axes`` memoises each value's dimension axes for the ops of one ``reader``
    (a value is the result of one op and an operand of others).
    """
    graph = reader.graph
    if axes is None:
        axes = {}
    out = []
    for value in (*graph.op_operands[op], *graph.op_results[op]):
        found = axes.get(value)
        if found is None and value not in axes:
            found = axes[value] = reader.axes(value)
        out.append(found)
    return tuple(out)


def signature_values(reader: ModuleValues) -> tuple[list[tuple[int, tuple[int, ...]]], list[int]]:
    """``(tag, values)`` of every tagged op (its operands, then its results) and the
    values in the order ``signatures`` first reads them: the graph's alone, kept in
    ``reader.facts``."""
    layout = reader.facts.get("signature values")
    if layout is None:
        graph = reader.graph
        ops = [(tag, (*graph.op_operands[op], *graph.op_results[op]))
               for op, tag in enumerate(op_tags(reader.facts, graph)) if tag is not None]
        order = list(dict.fromkeys(value for _, values in ops for value in values))
        layout = reader.facts["signature values"] = (ops, order)
    return layout


def signatures(reader: ModuleValues) -> dict[int, tuple]:
    """``signature`` of every tagged op, by tag.

    Which values make up each signature is the graph's alone, kept in
    ``reader.facts`` (shared by the readers of one read); each value's axes
    are read once, in the order ``signature`` would first ask for them.
    """
    ops, order = signature_values(reader)
    axes_of = reader.axes
    axes = {value: axes_of(value) for value in order}
    return {tag: tuple([axes[value] for value in values]) for tag, values in ops}


def insert_operand_reshards(module: ir.Operation, tags: set[int],
                            memo: ReadMemo | None = None) -> int:
    """Reshard the operands of the tagged ops to what each op needs; return how many.

    One ``sdy.reshard`` per (value, target sharding), before the first op that
    needs it, feeds every op that needs the value in that sharding, tagged or
    not: the cost model counts such a reshard once (XLA reuses a value it
    already resharded for an op), and an explicit reshard next to an implicit
    one of the same value would be compiled twice. So only the tagged ops and
    the other users of the values they need resharded are asked what they need.
    ``memo``: the ``ReadMemo`` the search read its copies of ``module`` with (rules and
    shardings it already read; not a conservative search's, whose rules differ).
    """
    if not tags:
        return 0
    graph = PropagationGraph(module, memo=memo)
    reader = ModuleValues(module, missing_as_replicated=True, read=(graph, ShardingStore(graph)))
    tagged = {op: _operand_targets(reader, op) for op in range(len(graph.ops))
              if not graph.op_blocks[op] and tag_of(reader, op) in tags}
    wanted: dict[tuple, TensorSharding] = {}  # (value, target axes) -> sharding
    for op, found in tagged.items():
        if found is None:
            continue
        operands, targets = found
        for index, target in targets:
            mesh = operands[index].sharding.mesh
            wanted.setdefault((graph.op_operands[op][index], target), TensorSharding(
                mesh, tuple(DimSharding(tuple(a), True) for a in target)))
    resharded = {value for value, _ in wanted}
    users: dict[tuple, list[tuple[int, int]]] = {}  # -> (op, operand index), in op order
    for op in range(len(graph.ops)):
        if op in tagged:
            found = tagged[op]
        elif not graph.op_blocks[op] and any(v in resharded for v in graph.op_operands[op]):
            found = _operand_targets(reader, op)
        else:
            continue
        for index, target in found[1] if found is not None else ():
            key = (graph.op_operands[op][index], target)
            if key in wanted:
                users.setdefault(key, []).append((op, index))
    for key, sharding in wanted.items():
        first = graph.ops[_first_user_in_defining_block(graph, key[0], users[key])]
        attr = ir.Attribute.parse(format_sharding(sharding), module.context)
        reshard = sdy.ReshardOp(graph.values[key[0]], attr, ip=ir.InsertionPoint(first),
                                loc=first.location)
        for op, index in users[key]:
            graph.ops[op].operands[index] = reshard.result
    return len(wanted)


def _operand_targets(reader: ModuleValues, op: int) -> tuple[list, list[tuple]] | None:
    """The operand tensors of ``op`` and, by operand index (ascending), the dimension
    axes its first need of that operand reshards it to; None where
    ``communication_needs`` finds nothing."""
    found = communication_needs(reader, op)
    if found is None:
        return None
    _, operands, results, needs = found
    # The needs' axes are the op's mesh's (its first sharding's, as the cost model
    # reads them): an operand on another mesh keeps the reshard Shardy inserts.
    tensors = (*results, *operands)
    mesh = tensors[0].sharding.mesh if tensors else None
    targets: dict[int, tuple] = {}
    for need in needs:
        if (need.operand is not None and need.target is not None
                and same_mesh(reader, operands[need.operand].sharding.mesh, mesh)):
            targets.setdefault(need.operand, need.target)
    return operands, sorted(targets.items())


def _first_user_in_defining_block(graph, value: int, users: list[tuple[int, int]]) -> int:
    """The earliest op of the value's own block that is, or holds, one of ``users``."""
    definition = graph.value_def[value]
    block_owner = graph.op_parent[definition] if definition >= 0 else graph.value_owner[value]
    firsts = []
    for op, _ in users:
        while graph.op_parent[op] != block_owner:
            op = graph.op_parent[op]
        firsts.append(op)
    return min(firsts)  # graph indices are pre-order: the earliest in the block


def constrain_changed_results(module: ir.Operation, tags: set[int]) -> int:
    """Constrain every result of the tagged ops to its own sharding; return how many."""
    count = 0
    for tag, op in tagged_ops(module) if tags else ():
        if tag in tags and SHARDING_ATTR in op.attributes:
            shardings = sdy.TensorShardingPerValueAttr(op.attributes[SHARDING_ATTR]).shardings
            sdy.constrain_results(op, shardings)
            count += len(shardings)
    return count
