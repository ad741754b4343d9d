"""Which values XLA never gives a buffer of its own: producers it fuses into their consumers.

XLA fuses elementwise ops, broadcasts, reshapes, converts, iota, slices and
the like into the op that consumes them, so such a value exists only inside
the fused kernel of its consumer, provided every consumer can take it fused
(another fusible op or a reduction). Both memory models read this:
``explain.memory`` (``Lowered.memory_estimate``) and the cost-aware search's
memory peak (``cost_aware.pricing``).
"""

from __future__ import annotations

from shardc.compiler.propagation.graph import ELEMENTWISE

# Ops that move no data at run time (or only pass their operand on).
FREE = frozenset({"sdy.constant", "stablehlo.constant", "sdy.sharding_constraint",
                  "sdy.reshard", "stablehlo.optimization_barrier", "sdy.data_flow_edge",
                  "sdy.propagation_barrier", "stablehlo.get_tuple_element"})
# chlo's elementwise ops (jax lowers ``square``, ``erf``, ``tan``, ``lgamma`` ... to
# them) are expanded into elementwise HLO before XLA fuses: fusible alike.
CHLO_ELEMENTWISE = frozenset("chlo." + n for n in (
    "acos", "acosh", "asin", "asinh", "atan", "atanh", "bessel_i1e", "conj", "cosh",
    "digamma", "erf", "erf_inv", "erfc", "is_inf", "is_neg_inf", "is_pos_inf", "lgamma",
    "next_after", "polygamma", "sinh", "square", "tan", "zeta"))
FUSIBLE = ELEMENTWISE | CHLO_ELEMENTWISE | frozenset({
    "stablehlo.broadcast_in_dim", "stablehlo.concatenate", "stablehlo.convert",
    "stablehlo.dynamic_slice", "stablehlo.iota", "stablehlo.pad", "stablehlo.reshape",
    "stablehlo.reverse", "stablehlo.slice", "stablehlo.transpose",
}) | FREE
# Consumers a fusible producer fuses into.
FUSING_CONSUMERS = FUSIBLE | frozenset({"stablehlo.reduce"})


def fused_away(producer: str, consumers) -> bool:
    """Whether a value made by op ``producer`` and used by ops ``consumers`` (names) is
    fused into them, never materialised (a value nothing uses is not fused away)."""
    if producer not in FUSIBLE:
        return False
    consumers = set(consumers)
    return bool(consumers) and consumers <= FUSING_CONSUMERS
