"""Export the resolved conflicts as explicit ``sdy.reshard`` ops.

XLA's dot handler has its own heuristics for operands that disagree with a
dot's result (``docs/cost-model.md``); the cost model prices the reshards
``op_comm`` chooses. So that XLA compiles exactly what was costed, every op
whose shardings the cost-aware search changed gets an ``sdy.reshard`` of
each operand to the sharding the op needs (``op_comm.required_sharding``):
XLA then sees compatible operands and only lowers plain reshards (and the
all-reduce of a sharded reduction factor).
"""

from __future__ import annotations

from jaxlib.mlir import ir
from jaxlib.mlir.dialects import sdy

from shardc.compiler.cost.values import ModuleValues
from shardc.compiler.cost_aware.candidates import communication_needs, tag_of
from shardc.compiler.propagation.sharding import DimSharding, TensorSharding, format_sharding


def signature(reader: ModuleValues, op: int) -> tuple:
    """The dimension axes of every operand and result of ``op`` (what decides its comm)."""
    graph = reader.graph
    out = []
    for value in (*graph.op_operands[op], *graph.op_results[op]):
        sharding = reader.sharding(value)
        out.append(None if sharding is None else tuple(d.axes for d in sharding.dims))
    return tuple(out)


def signatures(reader: ModuleValues) -> dict[int, tuple]:
    """``signature`` of every tagged op, by tag."""
    out = {}
    for op in range(len(reader.graph.ops)):
        tag = tag_of(reader, op)
        if tag is not None:
            out[tag] = signature(reader, op)
    return out


def insert_operand_reshards(module: ir.Operation, tags: set[int]) -> int:
    """Reshard the operands of the tagged ops to what each op needs; return how many."""
    if not tags:
        return 0
    reader = ModuleValues(module, missing_as_replicated=True)
    graph = reader.graph
    edits = []
    for op in range(len(graph.ops)):
        if tag_of(reader, op) not in tags or graph.op_blocks[op]:
            continue
        found = communication_needs(reader, op)
        if found is None:
            continue
        _, operands, _, needs = found
        targets = {}
        for need in needs:
            if need.operand is not None and need.target is not None:
                targets.setdefault(need.operand, need.target)
        for index, target in sorted(targets.items()):
            mesh = operands[index].sharding.mesh
            sharding = TensorSharding(mesh, tuple(DimSharding(tuple(a), True) for a in target))
            edits.append((graph.ops[op], index, sharding))
    for op, index, sharding in edits:
        attr = ir.Attribute.parse(format_sharding(sharding), op.context)
        reshard = sdy.ReshardOp(op.operands[index], attr, ip=ir.InsertionPoint(op),
                                loc=op.location)
        op.operands[index] = reshard.result
    return len(edits)
