"""Where Shardy's ``sdy-insert-explicit-reshards`` reshards, decided on a propagated
module (the non-full version, for the cases below): a concatenate's operands
sharded otherwise than its result, and a dot whose result conflicts with operands
that agree (Shardy's dot rule: computed as the operands imply, resharded after).
XLA runs that pass before partitioning, so the communication model reads the
same decisions (``cost.report``); ``passes.insert_explicit_reshards`` applies them."""

from __future__ import annotations

from dataclasses import dataclass

from jaxlib.mlir import ir

from shardc.compiler.propagation.projection import AXES, TensorProjection, back_project, project
from shardc.compiler.propagation.values import ModuleValues, replicated
from shardc.compiler.sharding.axes import AxisRef, overlaps
from shardc.compiler.sharding.rules import rule_for
from shardc.compiler.sharding.tensor import TensorSharding

DOTS = ("stablehlo.dot", "stablehlo.dot_general")


@dataclass(frozen=True)
class OperandReshard:
    """Reshard operand ``index`` of ``op`` to ``sharding`` just before ``op``."""

    op: ir.Operation
    index: int
    sharding: TensorSharding


@dataclass(frozen=True)
class ResultReshard:
    """Give ``op``'s result ``computed``, then reshard it back to ``wanted`` for its users."""

    op: ir.Operation
    computed: TensorSharding
    wanted: TensorSharding


def _dims(sharding: TensorSharding) -> tuple:
    return tuple(d.axes for d in sharding.dims)


def plan_concatenate(values: ModuleValues, op: int) -> list[OperandReshard]:
    """Operands sharded otherwise than the result get resharded to it.

    Only when the result leaves the concatenated dimension unsharded (Shardy
    then moves the concat-dimension axes elsewhere first; not done here).
    """
    graph = values.graph
    result = values.store.get(graph.op_results[op][0])
    if result is None:
        return []
    dim = ir.IntegerAttr(graph.ops[op].attributes["dimension"]).value
    operands = [values.store.get(v) or replicated(result.mesh, graph.value_rank(v))
                for v in graph.op_operands[op]]
    if all(_dims(o) == _dims(result) for o in operands) or result.dims[dim].axes:
        return []
    return [OperandReshard(graph.ops[op], k, result)
            for k, o in enumerate(operands) if _dims(o) != _dims(result)]


def _factor_axes(proj: TensorProjection, factor: int) -> tuple[AxisRef, ...] | None:
    record = proj.factors.get(factor)
    return None if record is None else tuple(record[AXES])


def plan_dot(values: ModuleValues, op: int) -> list[ResultReshard]:
    """Shardy's dot rule: compute a conflicting result like its operands, reshard after.

    Applies when the operands agree, exactly one result factor conflicts with
    them, the result is no larger than the conflicting operand, and the
    result's major-most axis on that factor is a reduction axis: the dot then
    runs more sharded and the reshard moves the smaller tensor.
    """
    graph, store = values.graph, values.store
    rule = rule_for(graph.ops[op])
    result = store.get(graph.op_results[op][0])
    if rule is None or result is None:
        return []
    sizes = rule.factor_sizes
    lhs_v, rhs_v = graph.op_operands[op][:2]
    shardings = [store.get(v) or replicated(result.mesh, graph.value_rank(v))
                 for v in (lhs_v, rhs_v)]
    lhs, rhs = (project(s, m, sizes) for s, m in zip(shardings, rule.operand_mappings))
    res = project(result, rule.result_mappings[0], sizes)
    elements = [_elements(graph.value_shape[v]) for v in (lhs_v, rhs_v)]
    lhs_free = [a for f in lhs.factors if f not in rhs.factors for a in lhs.factors[f][AXES]]
    conflict, conflict_axes, reduction = None, (), []
    for factor in range(len(sizes)):
        axes, largest = (), 1
        if (found := _factor_axes(lhs, factor)) is not None:
            axes, largest = found, elements[0]
        if (found := _factor_axes(rhs, factor)) is not None:
            if not axes and any(overlaps(a, b) for a in lhs_free for b in found):
                return []  # lhs and rhs non-contracting dims conflict
            if axes and found != axes:
                return []  # batching or contracting dims conflict
            axes, largest = found, max(largest, elements[1])
            if factor in rule.reduction_factors:
                reduction += axes
        have = _factor_axes(res, factor)
        if have is None or have == axes:
            continue
        if conflict is not None or _elements(graph.value_shape[graph.op_results[op][0]]) > largest:
            return []
        conflict, conflict_axes = factor, axes
    if conflict is None:
        return []
    have = res.factors[conflict][AXES]
    if have and not any(overlaps(have[0], a) for a in reduction):
        return []
    res.factors[conflict][AXES] = conflict_axes
    computed = back_project(res, rule.result_mappings[0], sizes, result.mesh)
    return [ResultReshard(graph.ops[op], computed, result)]


def _elements(shape) -> int:
    total = 1
    for size in shape or ():
        total *= size
    return total
