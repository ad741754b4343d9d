"""Branches XLA never runs: a ``case`` / ``if`` whose index folds to a constant.

Libraries guard their arguments with branches on values known when tracing:
equinox's ``error_if`` checks (diffrax asks whether ``t1 < t0`` of constant
times) lower to a ``stablehlo.case`` whose index is computed from constants
only, and whose error branch calls the host. XLA folds the index (constant
folding) and replaces the conditional by its taken branch (its conditional
simplifier) before partitioning, so the other branches' collectives never
exist (checked on XLA:CPU: diffrax's ``Kvaerno3`` solve with its
``t0``/``t1`` checks). ``untaken`` says which ops lie in such a branch.

The index is folded with numpy over a few elementwise and shape ops; any
other op, or a value read from an argument, leaves it unknown and every branch
counts. As XLA's algebraic simplifier does, a ``select`` whose predicate folds
is the operand it picks, and an ``and`` / ``or`` with an all-false / all-true
operand is that operand, whatever the other one holds (jaxopt's line searches
guard a branch on such a flag).
"""

from __future__ import annotations

import numpy as np
from jaxlib.mlir import ir

from shardc.compiler.propagation.graph import PropagationGraph as Graph

_BRANCHING = frozenset({"stablehlo.case", "stablehlo.if"})
_CONSTANTS = frozenset({"stablehlo.constant", "sdy.constant"})
# A module read before export still holds Shardy's data-flow edge after each case /
# while result: it hands its input on unchanged (XLA never sees one).
_EDGE = "sdy.data_flow_edge"
_PASS_ON = frozenset({"sdy.sharding_constraint", "sdy.reshard", _EDGE})
# How many ops one index may be folded through (a guard on the work, not a rule).
_LIMIT = 512
_COMPARE = {"EQ": np.equal, "NE": np.not_equal, "LT": np.less, "LE": np.less_equal,
            "GT": np.greater, "GE": np.greater_equal}
_ELEMENTWISE = {"stablehlo.add": np.add, "stablehlo.subtract": np.subtract,
                "stablehlo.multiply": np.multiply, "stablehlo.minimum": np.minimum,
                "stablehlo.maximum": np.maximum, "stablehlo.and": np.logical_and,
                "stablehlo.or": np.logical_or}
# Boolean ops one operand decides: the value that decides it.
_ABSORBING = {"stablehlo.and": False, "stablehlo.or": True}
_REDUCERS = {"stablehlo.or": np.logical_or, "stablehlo.and": np.logical_and,
             "stablehlo.add": np.add, "stablehlo.maximum": np.maximum,
             "stablehlo.minimum": np.minimum}


def untaken(graph: Graph, op: int, memo: dict[int, int | None]) -> bool:
    """Whether op ``op`` lies in a branch XLA folds away (``memo``: each branching
    op's taken branch, filled as asked)."""
    child, parent = op, graph.op_parent[op]
    while parent >= 0:
        if graph.op_name[parent] in _BRANCHING:
            if parent not in memo:
                memo[parent] = taken_branch(graph, parent)
            taken = memo[parent]
            if taken is not None and _branch_of(graph, parent, child) != taken:
                return True
        child, parent = parent, graph.op_parent[parent]
    return False


def folded_value(graph: Graph, value: int, memo: dict[int, int | None]) -> int:
    """The value XLA holds for ``value``: through every folded ``case`` / ``if`` that
    defines it (seen through Shardy's data-flow edge on its result), what its taken
    branch returns (``value`` itself otherwise)."""
    source = _edge_input(graph, value)
    op = graph.value_def[source]
    while op >= 0 and graph.op_name[op] in _BRANCHING:
        if op not in memo:
            memo[op] = taken_branch(graph, op)
        if memo[op] is None:
            break
        returned = graph.op_operands[graph.op_blocks[op][memo[op]][1][-1]]
        value = returned[graph.op_results[op].index(source)]
        source = _edge_input(graph, value)
        op = graph.value_def[source]
    return value


def _edge_input(graph: Graph, value: int) -> int:
    """The input of the ``sdy.data_flow_edge`` defining ``value`` (``value`` otherwise)."""
    op = graph.value_def[value]
    return graph.op_operands[op][0] if op >= 0 and graph.op_name[op] == _EDGE else value


def taken_branch(graph: Graph, op: int) -> int | None:
    """The branch a ``case`` / ``if`` always takes (None: not known at compile time).
    An out-of-range ``case`` index takes the last branch, as XLA's does."""
    index = _fold(graph, graph.op_operands[op][0], [0])
    if index is None:
        return None
    value = int(np.asarray(index).reshape(()))
    branches = len(graph.op_blocks[op])
    if graph.op_name[op] == "stablehlo.if":
        return 0 if value else 1
    return value if 0 <= value < branches else branches - 1


def _branch_of(graph: Graph, branching: int, op: int) -> int | None:
    for k, (_, ops) in enumerate(graph.op_blocks[branching]):
        if op in ops:
            return k
    return None


def _fold(graph: Graph, value: int, spent: list[int]) -> np.ndarray | None:
    op = graph.value_def[value]
    spent[0] += 1
    if op < 0 or spent[0] > _LIMIT:
        return None  # a block argument, or too far
    name, ir_op = graph.op_name[op], graph.ops[op]
    if name in _CONSTANTS:
        return _constant(ir_op)
    if name in _BRANCHING:  # a folded branch's result: what its taken branch returns
        taken = taken_branch(graph, op)
        if taken is None:
            return None
        returned = graph.op_operands[graph.op_blocks[op][taken][1][-1]]
        return _fold(graph, returned[graph.op_results[op].index(value)], spent)
    if name == "stablehlo.select":
        return _fold_select(graph, op, spent)
    operands = [_fold(graph, v, spent) for v in graph.op_operands[op]]
    if name in _ABSORBING:
        return _absorbed(name, ir_op, operands)
    if any(folded is None for folded in operands):
        return None
    return _apply(name, ir_op, operands, graph, op)


def _fold_select(graph: Graph, op: int, spent: list[int]) -> np.ndarray | None:
    """A ``select`` whose predicate folds to one value is the operand it picks, as XLA's
    algebraic simplifier replaces it, whether or not the other operand folds."""
    predicate, on_true, on_false = graph.op_operands[op]
    chosen = _fold(graph, predicate, spent)
    if chosen is None:
        return None
    if np.all(chosen) or not np.any(chosen):
        picked = _fold(graph, on_true if np.all(chosen) else on_false, spent)
        return None if picked is None else np.asarray(picked)
    operands = [_fold(graph, v, spent) for v in (on_true, on_false)]
    return None if any(v is None for v in operands) else np.where(chosen, *operands)


def _absorbed(name: str, ir_op: ir.Operation, operands: list) -> np.ndarray | None:
    """``and`` / ``or`` of booleans with one operand all false / all true: that value
    whatever the other is (XLA's algebraic simplifier: ``A && false => false``,
    ``A || true => true``); both folded: the elementwise result."""
    absorbing = _ABSORBING[name]
    shape = tuple(ir.RankedTensorType(ir_op.results[0].type).shape)
    for folded in operands:
        if folded is not None and np.asarray(folded).dtype == np.bool_ \
                and np.all(np.asarray(folded) == absorbing):
            return np.full(shape, absorbing)
    if any(folded is None for folded in operands):
        return None
    return _ELEMENTWISE[name](*operands)


def _constant(ir_op: ir.Operation) -> np.ndarray | None:
    attr = ir_op.attributes["value"]
    if not isinstance(attr, (ir.DenseIntElementsAttr, ir.DenseFPElementsAttr)):
        return None
    shape = tuple(ir.RankedTensorType(ir_op.results[0].type).shape)
    if attr.is_splat:
        return np.full(shape, attr.get_splat_value().value)
    return np.asarray(attr).reshape(shape)


def _apply(name: str, ir_op: ir.Operation, operands: list, graph: Graph, op: int):
    if name in _PASS_ON or name == "stablehlo.convert" or name == "stablehlo.reshape":
        shape = tuple(ir.RankedTensorType(ir_op.results[0].type).shape)
        return np.reshape(operands[0], shape)
    if name in _ELEMENTWISE:
        return _ELEMENTWISE[name](*operands)
    if name == "stablehlo.clamp":  # clamp(min, operand, max): lax.switch's index
        return np.clip(operands[1], operands[0], operands[2])
    if name == "stablehlo.not":
        return np.logical_not(operands[0])
    if name == "stablehlo.compare":
        direction = str(ir_op.attributes["comparison_direction"]).split()[-1].strip(">")
        compare = _COMPARE.get(direction)
        return None if compare is None else compare(*operands)
    if name == "stablehlo.slice":
        starts, limits, strides = (list(ir.DenseI64ArrayAttr(ir_op.attributes[k]))
                                   for k in ("start_indices", "limit_indices", "strides"))
        return operands[0][tuple(slice(a, b, s) for a, b, s in zip(starts, limits, strides))]
    if name == "stablehlo.broadcast_in_dim":
        shape = tuple(ir.RankedTensorType(ir_op.results[0].type).shape)
        dims = list(ir.DenseI64ArrayAttr(ir_op.attributes["broadcast_dimensions"]))
        source = np.asarray(operands[0])
        expanded = [1] * len(shape)
        for d, size in zip(dims, source.shape):
            expanded[d] = size
        return np.broadcast_to(source.reshape(expanded), shape)
    if name == "stablehlo.reduce" and len(operands) == 2:
        body = graph.op_blocks[op][0][1]
        reducer = _REDUCERS.get(graph.op_name[body[0]]) if len(body) == 2 else None
        if reducer is None:
            return None
        dims = tuple(ir.DenseI64ArrayAttr(ir_op.attributes["dimensions"]))
        return reducer.reduce(np.asarray(operands[0]), axis=dims,
                              initial=np.asarray(operands[1]).reshape(()))
    return None
