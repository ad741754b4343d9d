"""Propagation directions, their algebra, and the op-priority heuristics (spec 5).

Directions are small ints so that ``max``/``min`` are the union/intersection
of everything but the FORWARD/BACKWARD pair: NONE=0 < FORWARD=1 < BACKWARD=2
< BOTH=3. A *direction function* maps ``(graph, op, factor)`` to a direction;
the driver calls it for every factor that is not blocked. The heuristics below
classify ops by name because that is what Shardy's op-priority heuristics do;
the driver itself never looks at op names.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from shardc.compiler.propagation.graph import PropagationGraph

NONE, FORWARD, BACKWARD, BOTH = 0, 1, 2, 3
NAMES = {NONE: "NONE", FORWARD: "FORWARD", BACKWARD: "BACKWARD", BOTH: "BOTH"}
BY_NAME = {name: value for value, name in NAMES.items()}

DirectionFn = Callable[["PropagationGraph", int, int], int]


def union(a: int, b: int) -> int:
    """Directions allowed by either (FORWARD with BACKWARD gives BOTH)."""
    if {a, b} == {FORWARD, BACKWARD}:
        return BOTH
    return max(a, b)


def intersection(a: int, b: int) -> int:
    """Directions allowed by both (FORWARD with BACKWARD gives NONE)."""
    if {a, b} == {FORWARD, BACKWARD}:
        return NONE
    return min(a, b)


def propagate_any(graph: PropagationGraph, op: int, factor: int) -> int:
    """Every factor may propagate both ways (basic and aggressive passes)."""
    return BOTH


_PASS_THROUGH_EXTRA = frozenset({
    "stablehlo.reshape",
    "stablehlo.transpose",
    "sdy.data_flow_edge",
    "sdy.func_data_flow_edge",
})
_FORWARD_ONLY = frozenset({"stablehlo.dynamic_slice", "stablehlo.dynamic_update_slice"})
_MOVE_TARGETS = frozenset({"MoveToDevice", "MoveToHost"})


def _pass_through_direction(graph: PropagationGraph, op: int) -> int:
    name = graph.op_name[op]
    if (
        name in _PASS_THROUGH_EXTRA
        or graph.is_elementwise(op)
        or (name == "stablehlo.custom_call" and graph.custom_call_target(op) in _MOVE_TARGETS)
    ):
        return BOTH
    if name in _FORWARD_ONLY:
        return FORWARD
    return NONE


def pass_through_single_use(graph: PropagationGraph, op: int, factor: int) -> int:
    """h0: pass-through ops whose non-scalar operands have a single use."""
    direction = _pass_through_direction(graph, op)
    if direction == NONE:
        return NONE
    for value in graph.op_operands[op]:
        if graph.value_rank(value) != 0 and graph.num_uses(value) > 1:
            return NONE
    return direction


def pass_through_any_use(graph: PropagationGraph, op: int, factor: int) -> int:
    """h1: pass-through ops regardless of use counts."""
    return _pass_through_direction(graph, op)


def pass_through_factors(graph: PropagationGraph, op: int, factor: int) -> int:
    """h2: no non-pass-through factors of ruled ops; broadcasts only backward."""
    rule = graph.cached_rule(op)
    if rule is not None and rule.kind_code(factor) != 0:
        return NONE
    if graph.op_name[op] == "stablehlo.broadcast_in_dim":
        return BACKWARD
    return BOTH


def broadcast_backward(graph: PropagationGraph, op: int, factor: int) -> int:
    """h3: broadcasts only backward, everything else both ways."""
    return BACKWARD if graph.op_name[op] == "stablehlo.broadcast_in_dim" else BOTH


# Heuristics whose answer does not depend on the factor (computed once per op).
FACTOR_INDEPENDENT = frozenset({
    pass_through_single_use, pass_through_any_use, broadcast_backward, propagate_any,
})

OP_PRIORITY_HEURISTICS: tuple[DirectionFn, ...] = (
    pass_through_single_use,
    pass_through_any_use,
    pass_through_factors,
    broadcast_backward,
    propagate_any,
)


def union_of(heuristics: Sequence[DirectionFn], outer: DirectionFn | None = None) -> DirectionFn:
    """The union of ``heuristics``, intersected with ``outer`` when given."""

    def direction(graph: PropagationGraph, op: int, factor: int) -> int:
        result = NONE
        for heuristic in heuristics:
            result = union(result, heuristic(graph, op, factor))
            if result == BOTH:
                break
        if outer is not None:
            result = intersection(result, outer(graph, op, factor))
        return result

    def for_factors(graph: PropagationGraph, op: int, factors: Sequence[int]) -> list[int]:
        """``direction`` for each of ``factors``; factor-independent heuristics run once."""
        shared = NONE
        for heuristic in heuristics:
            if heuristic in FACTOR_INDEPENDENT:
                shared = union(shared, heuristic(graph, op, 0))
        per_factor = [h for h in heuristics if h not in FACTOR_INDEPENDENT]
        out = []
        for factor in factors:
            result = shared
            for heuristic in per_factor:
                if result == BOTH:
                    break
                result = union(result, heuristic(graph, op, factor))
            if outer is not None:
                result = intersection(result, outer(graph, op, factor))
            out.append(result)
        return out

    direction.for_factors = for_factors  # type: ignore[attr-defined]
    return direction
