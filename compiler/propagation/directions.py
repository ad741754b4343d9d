"""Propagation directions, their algebra, and the op-priority heuristics.

Directions are small ints so that ``max``/``min`` are the union/intersection
of everything but the FORWARD/BACKWARD pair: NONE=0 < FORWARD=1 < BACKWARD=2
< BOTH=3. A *direction function* maps ``(graph, op, factor)`` to a direction;
the driver calls it for every factor that is not blocked. The heuristics below
classify ops by name because that is what Shardy's op-priority heuristics do;
the driver itself never looks at op names.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from shardc.compiler.propagation.graph import PropagationGraph

NONE, FORWARD, BACKWARD, BOTH = 0, 1, 2, 3
NAMES = {NONE: "NONE", FORWARD: "FORWARD", BACKWARD: "BACKWARD", BOTH: "BOTH"}
BY_NAME = {name: value for value, name in NAMES.items()}

DirectionFn = Callable[["PropagationGraph", int, int], int]


def union(a: int, b: int) -> int:
    """Directions allowed by either (FORWARD with BACKWARD gives BOTH): ``a | b``."""
    return a | b


def intersection(a: int, b: int) -> int:
    """Directions allowed by both (FORWARD with BACKWARD gives NONE): ``a & b``."""
    return a & b


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
                shared |= heuristic(graph, op, 0)
        per_factor = [h for h in heuristics if h not in FACTOR_INDEPENDENT]
        out = []
        for factor in factors:
            result = shared
            for heuristic in per_factor:
                if result == BOTH:
                    break
                result |= heuristic(graph, op, factor)
            if outer is not None:
                result &= outer(graph, op, factor)
            out.append(result)
        return out

    direction.for_factors = for_factors  # type: ignore[attr-defined]
    return direction


class DirectionChain:
    """Cumulative unions of a heuristic list: level k is ``union_of(heuristics[:k+1])``.

    ``functions[k]`` is that union as a direction function (with
    ``chain``/``level`` attributes) and ``for_op`` computes every level of one
    op in a single pass, which is what op-priority propagation asks for, level
    after level, for each op.
    ``signature`` (optional) names what the heuristics read about an op beyond
    its plan key: the driver memoises the levels on both.
    """

    def __init__(self, heuristics: Sequence[DirectionFn],
                 signature: Callable[[PropagationGraph, int], Hashable] | None = None):
        self.heuristics = tuple(heuristics)
        self.signature = signature
        self.functions = []
        for level in range(len(self.heuristics)):
            function = union_of(self.heuristics[: level + 1])
            function.chain = self  # type: ignore[attr-defined]
            function.level = level  # type: ignore[attr-defined]
            self.functions.append(function)
        self.functions = tuple(self.functions)

    def for_op(self, graph: PropagationGraph, op: int, num_factors: int) -> list[list[int]]:
        """Per level, the direction of each factor of ``op`` (the left fold of ``|``)."""
        levels = []
        current = [NONE] * num_factors
        for heuristic in self.heuristics:
            if heuristic in FACTOR_INDEPENDENT:
                shared = heuristic(graph, op, 0)
                current = [d | shared for d in current]
            else:
                current = [d if d == BOTH else d | heuristic(graph, op, f)
                           for f, d in enumerate(current)]
            levels.append(current)
        return levels


def op_priority_signature(graph: PropagationGraph, op: int) -> Hashable:
    """What the op-priority heuristics read about ``op`` beyond its plan key.

    Ops with equal signatures and plan keys get equal directions from every
    heuristic above, so the driver computes them once per pair (its memo key
    holds both). Keep this in step with the heuristics: they read the name,
    elementwise-ness, custom call target, whether every non-scalar operand has
    a single use and the cached rule's factor kinds; the plan key already names
    the rule and elementwise-ness (edges and barriers have a name of their own,
    and no cached rule).
    """
    name = graph.op_name[op]
    shapes, uses = graph.value_shape, graph.uses
    for value in graph.op_operands[op]:
        if shapes[value] and len(uses[value]) > 1:
            single_use = False
            break
    else:
        single_use = True
    target = graph.custom_call_target(op) if name == "stablehlo.custom_call" else None
    return (name, target, single_use)


OP_PRIORITY_CHAIN = DirectionChain(OP_PRIORITY_HEURISTICS, op_priority_signature)
