"""``RuleBuilder``: assembles an ``OpShardingRule`` with Shardy's factor numbering.

Factors are numbered in the order they are added. ``build()`` then gives every
dimension that still has no factor its own size-1 factor, operands first (in
order, dims in order), then results, so that two builders fed the same calls
produce rules that print identically to Shardy's. ``None`` marks a tensor that
does not take part in a factor (Shardy's ``kNullDim``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from jaxlib.mlir import ir

from shardc.compiler.sharding.rule import FactorKind, OpShardingRule

Dims = int | None | Sequence[int | None]


def rank_of(value_type: ir.Type) -> int:
    """Rank of a ranked tensor type; 0 for anything unranked (tokens, tuples)."""
    if isinstance(value_type, ir.RankedTensorType):
        return ir.RankedTensorType(value_type).rank
    return 0


def shape_of(value: ir.Value) -> tuple[int, ...]:
    """Static shape of a ranked tensor value."""
    return tuple(ir.RankedTensorType(value.type).shape)


def _as_list(dims: Dims, count: int) -> list[int | None]:
    listed = [dims] if dims is None or isinstance(dims, int) else list(dims)
    return listed + [None] * (count - len(listed))


class RuleBuilder:
    """Collects factors for one op; ``build()`` returns the frozen rule."""

    def __init__(self, operand_ranks: Sequence[int], result_ranks: Sequence[int]) -> None:
        """Start with no factors for tensors of the given ranks."""
        self._operands: list[list[list[int]]] = [[[] for _ in range(r)] for r in operand_ranks]
        self._results: list[list[list[int]]] = [[[] for _ in range(r)] for r in result_ranks]
        self._sizes: list[int] = []
        self._kinds: list[FactorKind] = []
        self._blocked: list[int] = []

    @classmethod
    def for_op(cls, op: ir.Operation) -> RuleBuilder:
        """A builder shaped after ``op``'s operands and results."""
        return cls(
            [rank_of(v.type) for v in op.operands], [rank_of(v.type) for v in op.results]
        )

    def _new_factor(self, size: int, kind: FactorKind, blocked: bool) -> int:
        self._sizes.append(size)
        self._kinds.append(kind)
        if blocked:
            self._blocked.append(len(self._sizes) - 1)
        return len(self._sizes) - 1

    def add_factor(
        self,
        operand_dims: Dims,
        result_dims: Dims,
        size: int,
        kind: FactorKind = FactorKind.PASS_THROUGH,
        *,
        blocked: bool = False,
    ) -> RuleBuilder:
        """Add a factor mapped to ``operand_dims[k]`` of operand k and likewise for results.

        A single int stands for a one-element list. Missing trailing entries are
        ``None``. A size-1 factor is not appended to a dim that already has one.
        """
        factor = self._new_factor(size, kind, blocked)
        for tensors, dims in ((self._operands, operand_dims), (self._results, result_dims)):
            for mapping, dim in zip(tensors, _as_list(dims, len(tensors)), strict=True):
                if dim is not None and not (size == 1 and mapping[dim]):
                    mapping[dim].append(factor)
        return self

    def add_factor_to_all(
        self,
        dim: int,
        size: int,
        kind: FactorKind = FactorKind.PASS_THROUGH,
        *,
        blocked: bool = False,
    ) -> RuleBuilder:
        """Add a factor mapped to ``dim`` of every operand and result of non-zero rank."""
        factor = self._new_factor(size, kind, blocked)
        for mapping in (*self._operands, *self._results):
            if mapping:
                mapping[dim].append(factor)
        return self

    def add_pointwise(
        self,
        shape: Sequence[int],
        kind_of: Callable[[int], FactorKind] | None = None,
        *,
        blocked_if: Callable[[int], bool] | None = None,
    ) -> RuleBuilder:
        """Add one factor per dim of ``shape``, mapped to that dim of every tensor."""
        return self.add_pointwise_if(shape, lambda _: True, kind_of, blocked_if=blocked_if)

    def add_pointwise_if(
        self,
        shape: Sequence[int],
        pred: Callable[[int], bool],
        kind_of: Callable[[int], FactorKind] | None = None,
        *,
        blocked_if: Callable[[int], bool] | None = None,
    ) -> RuleBuilder:
        """Like ``add_pointwise`` but only for the dims where ``pred(dim)`` holds."""
        for dim, size in enumerate(shape):
            if pred(dim):
                kind = kind_of(dim) if kind_of else FactorKind.PASS_THROUGH
                blocked = blocked_if(dim) if blocked_if else False
                self.add_factor_to_all(dim, size, kind, blocked=blocked)
        return self

    def build(self, *, is_custom: bool = False) -> OpShardingRule:
        """Freeze the rule; unmapped dims get fresh size-1 factors (operands, then results)."""
        sizes = list(self._sizes)

        def freeze(tensors: list[list[list[int]]]) -> tuple[tuple[tuple[int, ...], ...], ...]:
            frozen = []
            for mapping in tensors:
                dims = []
                for factors in mapping:
                    if not factors:
                        factors = [len(sizes)]
                        sizes.append(1)
                    dims.append(tuple(factors))
                frozen.append(tuple(dims))
            return tuple(frozen)

        operands = freeze(self._operands)
        results = freeze(self._results)

        def of_kind(kind: FactorKind) -> tuple[int, ...]:
            return tuple(i for i, k in enumerate(self._kinds) if k is kind)

        return OpShardingRule(
            factor_sizes=tuple(sizes),
            operand_mappings=operands,
            result_mappings=results,
            reduction_factors=of_kind(FactorKind.REDUCTION),
            need_replication_factors=of_kind(FactorKind.NEED_REPLICATION),
            permutation_factors=of_kind(FactorKind.PERMUTATION),
            blocked_propagation_factors=tuple(self._blocked),
            is_custom=is_custom,
        )

    @staticmethod
    def pointwise(op: ir.Operation) -> OpShardingRule | None:
        """One pass-through factor per dim of result 0, in every non-scalar tensor."""
        if not op.results or not isinstance(op.results[0].type, ir.RankedTensorType):
            return None
        return RuleBuilder.for_op(op).add_pointwise(shape_of(op.results[0])).build()
