"""The factor-based op sharding rule, a pure-Python mirror of ``#sdy.op_sharding_rule``.

A rule names independent *factors* (with sizes) and says, for every dimension of
every operand and result, which factors it is made of (major to minor). Each
factor has one kind (pass-through, reduction, need-replication, permutation)
and may also be blocked from propagation. ``to_attr``/``from_attr`` convert to and
from ``sdy.OpShardingRuleAttr``; ``__str__`` prints exactly what Shardy prints.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass

from jaxlib.mlir import ir

from shardc.dialects import sdy

# One tensor's mapping: per dimension, the factor indices major to minor.
TensorMapping = tuple[tuple[int, ...], ...]

_FIRST_LETTERS = "ijklmnopqrstuvwxyz"


class FactorKind(enum.Enum):
    """How a factor behaves when it is sharded (Shardy's FactorType)."""

    PASS_THROUGH = "pass_through"
    REDUCTION = "reduction"
    NEED_REPLICATION = "need_replication"
    PERMUTATION = "permutation"


def factor_name(index: int) -> str:
    """Return Shardy's printed name of factor ``index``: i..z, then z_1, z_2, ..."""
    if index < len(_FIRST_LETTERS):
        return _FIRST_LETTERS[index]
    return f"z_{index - len(_FIRST_LETTERS) + 1}"


@dataclass(frozen=True)
class OpShardingRule:
    """Factor sizes, per-tensor dimension mappings and the factor kind sets."""

    factor_sizes: tuple[int, ...]
    operand_mappings: tuple[TensorMapping, ...]
    result_mappings: tuple[TensorMapping, ...]
    reduction_factors: tuple[int, ...] = ()
    need_replication_factors: tuple[int, ...] = ()
    permutation_factors: tuple[int, ...] = ()
    blocked_propagation_factors: tuple[int, ...] = ()
    is_custom: bool = False

    @property
    def num_factors(self) -> int:
        """Number of factors."""
        return len(self.factor_sizes)

    def kind(self, factor: int) -> FactorKind:
        """Return the kind of ``factor`` (pass-through when in none of the sets)."""
        if factor in self.reduction_factors:
            return FactorKind.REDUCTION
        if factor in self.need_replication_factors:
            return FactorKind.NEED_REPLICATION
        if factor in self.permutation_factors:
            return FactorKind.PERMUTATION
        return FactorKind.PASS_THROUGH

    def is_blocked(self, factor: int) -> bool:
        """Whether propagation along ``factor`` is blocked."""
        return factor in self.blocked_propagation_factors

    def to_attr(self, context: ir.Context | None = None) -> sdy.OpShardingRuleAttr:
        """Build the equivalent ``#sdy.op_sharding_rule`` attribute."""
        context = context or ir.Context.current

        def tensor(mapping: TensorMapping) -> ir.Attribute:
            dims = [sdy.DimMappingAttr.get(list(f), context=context) for f in mapping]
            return sdy.TensorMappingAttr.get(dims, context=context)

        return sdy.OpShardingRuleAttr.get(
            list(self.factor_sizes),
            [tensor(m) for m in self.operand_mappings],
            [tensor(m) for m in self.result_mappings],
            list(self.reduction_factors),
            list(self.need_replication_factors),
            list(self.permutation_factors),
            list(self.blocked_propagation_factors),
            self.is_custom,
            context=context,
        )

    @classmethod
    def from_attr(cls, attr: ir.Attribute) -> OpShardingRule:
        """Read a rule back from an ``#sdy.op_sharding_rule`` attribute."""
        attr = sdy.OpShardingRuleAttr(attr)

        def tensor(mapping: ir.Attribute) -> TensorMapping:
            dims = sdy.TensorMappingAttr(mapping).dim_mappings
            return tuple(tuple(sdy.DimMappingAttr(d).factor_indices) for d in dims)

        return cls(
            factor_sizes=tuple(attr.factor_sizes),
            operand_mappings=tuple(tensor(m) for m in attr.operand_mappings),
            result_mappings=tuple(tensor(m) for m in attr.result_mappings),
            reduction_factors=tuple(attr.reduction_factors),
            need_replication_factors=tuple(attr.need_replication_factors),
            permutation_factors=tuple(attr.permutation_factors),
            blocked_propagation_factors=tuple(attr.blocked_propagation_factors),
            is_custom=attr.is_custom,
        )

    def __str__(self) -> str:
        """Print like Shardy: ``#sdy.op_sharding_rule<([i, k], [k, j])->([i, j]) ...>``."""

        def tensors(mappings: Sequence[TensorMapping]) -> str:
            return ", ".join(
                "[" + ", ".join("".join(map(factor_name, dim)) for dim in m) + "]"
                for m in mappings
            )

        def factor_set(label: str, factors: Sequence[int]) -> str:
            names = ", ".join(map(factor_name, factors))
            return f" {label}={{{names}}}" if factors else ""

        text = f"({tensors(self.operand_mappings)})->({tensors(self.result_mappings)})"
        if self.factor_sizes:
            sizes = ", ".join(
                f"{factor_name(i)}={size}" for i, size in enumerate(self.factor_sizes)
            )
            text += f" {{{sizes}}}"
        text += factor_set("reduction", self.reduction_factors)
        text += factor_set("need_replication", self.need_replication_factors)
        text += factor_set("permutation", self.permutation_factors)
        text += factor_set("blocked_propagation", self.blocked_propagation_factors)
        if self.is_custom:
            text += ", custom"
        return f"#sdy.op_sharding_rule<{text}>"
