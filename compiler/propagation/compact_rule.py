"""The view of an ``OpShardingRule`` that the propagation hot loop reads.

``CompactRule`` keeps the factor sizes and mappings as tuples, the blocked
factors as a frozenset and one small int per factor for its kind (0 is
pass-through), so a propagation step never touches the rule dataclass or an
attribute. ``identity_rule`` is the rule Shardy uses for data-flow edges,
propagation barriers and func results: one pass-through factor per dim,
shared by every operand and the single result.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from shardc.compiler.sharding.rule import FactorKind, OpShardingRule

_KIND_CODE = {
    FactorKind.PASS_THROUGH: 0,
    FactorKind.REDUCTION: 1,
    FactorKind.NEED_REPLICATION: 2,
    FactorKind.PERMUTATION: 3,
}


@dataclass(frozen=True)
class CompactRule:
    """Factor sizes, mappings, kinds and blocked factors of one op's rule."""

    factor_sizes: tuple[int, ...]
    operand_mappings: tuple[tuple[tuple[int, ...], ...], ...]
    result_mappings: tuple[tuple[tuple[int, ...], ...], ...]
    kinds: tuple[int, ...]
    blocked: frozenset[int]
    rule: OpShardingRule | None = None

    def kind_code(self, factor: int) -> int:
        """0 pass-through, 1 reduction, 2 need-replication, 3 permutation."""
        return self.kinds[factor]


# id of a registry rule -> (the rule, kept alive so that the id stays its own, its
# compact view): the registry hands out the same rule object for the same key,
# and an id costs less than hashing the rule's nested tuples.
_by_identity: dict[int, tuple[OpShardingRule, CompactRule]] = {}
_IDENTITY_LIMIT = 4096


def compact_rule(rule: OpShardingRule) -> CompactRule:
    """Convert (and memoize) a registry rule; equal rules share one compact view."""
    known = _by_identity.get(id(rule))
    if known is not None:
        return known[1]
    if len(_by_identity) >= _IDENTITY_LIMIT:
        _by_identity.clear()
    compact = _compact_equal(rule)
    _by_identity[id(rule)] = (rule, compact)
    return compact


@lru_cache(maxsize=4096)
def _compact_equal(rule: OpShardingRule) -> CompactRule:
    return CompactRule(
        factor_sizes=tuple(rule.factor_sizes),
        operand_mappings=tuple(tuple(tuple(d) for d in m) for m in rule.operand_mappings),
        result_mappings=tuple(tuple(tuple(d) for d in m) for m in rule.result_mappings),
        kinds=tuple(_KIND_CODE[rule.kind(f)] for f in range(rule.num_factors)),
        blocked=frozenset(rule.blocked_propagation_factors),
        rule=rule,
    )


@lru_cache(maxsize=1024)
def identity_rule(shape: tuple[int, ...], num_operands: int = 1) -> CompactRule:
    """One pass-through factor per dim, mapped into every operand and the result."""
    mapping = tuple((d,) for d in range(len(shape)))
    return CompactRule(
        factor_sizes=tuple(shape),
        operand_mappings=(mapping,) * num_operands,
        result_mappings=(mapping,),
        kinds=(0,) * len(shape),
        blocked=frozenset(),
    )
