"""How many times a loop body runs: static trip counts of ``stablehlo.while`` loops.

``lax.scan`` and ``lax.fori_loop`` with static bounds lower to a while loop
whose condition compares one carry, the induction variable, with a constant
(``compare LT, %iterArg, %c``) and whose body adds a constant step to it;
the carry starts at a constant. ``trip_count`` reads those three constants
(as XLA's ``ComputeWhileLoopTripCount`` does for its pattern) and says how
many times the body runs, or None when any of them is not static.
``runs_per_step`` multiplies the trip counts of every loop around an op.
"""

from __future__ import annotations

from collections.abc import Iterator

from jaxlib.mlir import ir

from shardc.compiler.propagation.graph import PropagationGraph as Graph

_WHILE = "stablehlo.while"
_CONSTANTS = frozenset({"stablehlo.constant", "sdy.constant"})  # sdy's after propagation
# Ops that hand their operand on unchanged (the induction variable may pass
# through a sharding constraint after propagation).
_PASS_ON = frozenset({"sdy.sharding_constraint", "sdy.reshard", "sdy.data_flow_edge"})


def trip_count(graph: Graph, loop: int) -> int | None:
    """Iterations of while loop ``loop`` (a graph op index) when static, else None."""
    blocks = graph.op_blocks[loop]
    if graph.op_name[loop] != _WHILE or len(blocks) != 2:
        return None
    (cond_args, cond_ops), (body_args, body_ops) = blocks
    if not cond_ops or not body_ops:
        return None
    returned = graph.op_operands[cond_ops[-1]]
    compare = graph.value_def[_through(graph, returned[0])] if returned else -1
    if compare < 0 or graph.op_name[compare] != "stablehlo.compare":
        return None
    direction = str(graph.ops[compare].attributes["comparison_direction"])
    lhs, rhs = (_through(graph, v) for v in graph.op_operands[compare])
    if rhs in cond_args and lhs not in cond_args:  # limit OP i: flip to i OP' limit
        lhs, rhs = rhs, lhs
        direction = _FLIPPED.get(_direction(direction))
    else:
        direction = _direction(direction)
    if lhs not in cond_args or direction is None:
        return None
    k = cond_args.index(lhs)
    limit = _constant(graph, rhs, loop, k)
    start = _constant(graph, graph.op_operands[loop][k], loop, None)
    step = _step(graph, body_args[k], graph.op_operands[body_ops[-1]][k])
    if None in (limit, start, step) or step == 0:
        return None
    return _iterations(direction, start, limit, step)


def loops_around(graph: Graph, op: int) -> Iterator[int]:
    """The ``while`` ops ``op`` is nested in, innermost first."""
    parent = graph.op_parent[op]
    while parent >= 0:
        if graph.op_name[parent] == _WHILE:
            yield parent
        parent = graph.op_parent[parent]


def runs_per_step(graph: Graph, op: int, counts: dict[int, int | None]) -> int | None:
    """How often ``op`` runs per call of its function: the product of the trip counts
    of the loops around it (None when one is not static). ``counts`` caches them."""
    runs = 1
    for loop in loops_around(graph, op):
        if loop not in counts:
            counts[loop] = trip_count(graph, loop)
        if counts[loop] is None:
            return None
        runs *= counts[loop]
    return runs


_DIRECTIONS = {"LT": "LT", "LE": "LE", "GT": "GT", "GE": "GE", "NE": "NE"}
_FLIPPED = {"LT": "GT", "LE": "GE", "GT": "LT", "GE": "LE", "NE": "NE"}


def _direction(attribute: str) -> str | None:
    # printed as "#stablehlo<comparison_direction LT>"
    return _DIRECTIONS.get(attribute.rstrip(">").split()[-1])


def _iterations(direction: str, start: int, limit: int, step: int) -> int | None:
    if direction in ("LT", "LE") and step > 0:
        end = limit + (direction == "LE")
        return max(0, -(-(end - start) // step))
    if direction in ("GT", "GE") and step < 0:
        end = limit - (direction == "GE")
        return max(0, -(-(start - end) // -step))
    if direction == "NE" and (limit - start) % step == 0 and (limit - start) // step >= 0:
        return (limit - start) // step
    return None


def _through(graph: Graph, value: int) -> int:
    while graph.value_def[value] >= 0 and graph.op_name[graph.value_def[value]] in _PASS_ON:
        value = graph.op_operands[graph.value_def[value]][0]
    return value


def _constant(graph: Graph, value: int, loop: int, carry: int | None) -> int | None:
    """The integer ``value`` holds: a scalar constant, or (``carry`` k of ``loop``'s
    condition) a carry the body returns unchanged that starts as one."""
    value = _through(graph, value)
    op = graph.value_def[value]
    if op >= 0:
        if graph.op_name[op] not in _CONSTANTS:
            return None
        try:
            elements = ir.DenseIntElementsAttr(graph.ops[op].attributes["value"])
        except (ValueError, KeyError):
            return None
        return int(elements[0]) if len(elements) == 1 or elements.is_splat else None
    if carry is None or graph.value_owner[value] != loop:
        return None
    k = graph.op_blocks[loop][0][0].index(value)
    body_args, body_ops = graph.op_blocks[loop][1]
    if graph.op_operands[body_ops[-1]][k] != body_args[k]:
        return None
    return _constant(graph, graph.op_operands[loop][k], loop, None)


def _step(graph: Graph, induction: int, returned: int) -> int | None:
    """The constant the body adds to (or subtracts from) the induction variable."""
    op = graph.value_def[_through(graph, returned)]
    if op < 0 or graph.op_name[op] not in ("stablehlo.add", "stablehlo.subtract"):
        return None
    lhs, rhs = (_through(graph, v) for v in graph.op_operands[op])
    if graph.op_name[op] == "stablehlo.add" and rhs == induction:
        lhs, rhs = rhs, lhs
    if lhs != induction:
        return None
    step = _constant(graph, rhs, -1, None)
    if step is None:
        return None
    return step if graph.op_name[op] == "stablehlo.add" else -step
