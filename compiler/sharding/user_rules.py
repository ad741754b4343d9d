"""Sharding rules users register for their own custom call targets (kernels, FFI calls)
and for ops the registry has no rule for.

``register_sharding_rule("my_matmul", "ij,jk->ik", reduction="j")`` tells shardc
how a ``stablehlo.custom_call @my_matmul`` shards; given the name of an MLIR op
(``"chlo.lgamma"``) instead of a call target, the rule is that op's. The
einsum-like spec names
one factor per letter (or, when it contains spaces, per whitespace-separated
word: ``"b i j, b j k -> b i k"``), one group per operand and result;
``reduction`` / ``need_replication`` / ``permutation`` list factors of those
kinds (a factor only in operands is a reduction unless listed otherwise). Sizes
come from the op's shapes. A builder function ``rule(op) -> OpShardingRule``
(``shardc.compiler.sharding.builder.RuleBuilder``) may be given instead.
The registry's ``rule_for`` consults these rules first, so propagation, the
checks and the cost model all use them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from jaxlib.mlir import ir

from shardc.compiler.sharding.builder import RuleBuilder, rank_of
from shardc.compiler.sharding.rule import FactorKind, OpShardingRule
from shardc.dialects import make_context

RuleFunction = Callable[[ir.Operation], OpShardingRule]


@dataclass(frozen=True)
class FactorSpec:
    """A parsed einsum-like rule: factor names per dimension of each operand and result."""

    operands: tuple[tuple[str, ...], ...]
    results: tuple[tuple[str, ...], ...]
    reduction: frozenset[str] = frozenset()
    need_replication: frozenset[str] = frozenset()
    permutation: frozenset[str] = frozenset()

    @property
    def factors(self) -> list[str]:
        """Factor names in order of first appearance."""
        seen: list[str] = []
        for tensor in (*self.operands, *self.results):
            seen += [f for f in tensor if f not in seen]
        return seen

    def kind(self, factor: str) -> FactorKind:
        """The factor's kind (listed kinds first; operand-only factors are reductions)."""
        if factor in self.need_replication:
            return FactorKind.NEED_REPLICATION
        if factor in self.permutation:
            return FactorKind.PERMUTATION
        if factor in self.reduction or not any(factor in r for r in self.results):
            return FactorKind.REDUCTION
        return FactorKind.PASS_THROUGH

    def build(self, op: ir.Operation) -> OpShardingRule:
        """The rule for ``op``, with factor sizes read from its shapes."""
        operand_types = [v.type for v in op.operands]
        result_types = [v.type for v in op.results]
        _check_ranks("operand", self.operands, operand_types, op)
        _check_ranks("result", self.results, result_types, op)
        builder = RuleBuilder([rank_of(t) for t in operand_types],
                              [rank_of(t) for t in result_types])
        for factor in self.factors:
            sizes = {ir.RankedTensorType(t).shape[tensor.index(factor)]
                     for tensor, t in zip((*self.operands, *self.results),
                                          (*operand_types, *result_types))
                     if factor in tensor}
            if len(sizes) != 1:
                raise ValueError(f"factor {factor!r} of the rule for {_target(op)} has "
                                 f"different sizes {sorted(sizes)} in {op.name}'s types")
            builder.add_factor([t.index(factor) if factor in t else None for t in self.operands],
                               [t.index(factor) if factor in t else None for t in self.results],
                               sizes.pop(), self.kind(factor))
        return builder.build()


def _target(op: ir.Operation) -> str:
    if "call_target_name" not in op.attributes:
        return f"'{op.name}'"
    return "@" + ir.StringAttr(op.attributes["call_target_name"]).value


def _check_ranks(what: str, spec: Sequence[tuple[str, ...]], types: Sequence[ir.Type],
                 op: ir.Operation) -> None:
    ranks = [rank_of(t) for t in types]
    if [len(t) for t in spec] != ranks:
        raise ValueError(f"the sharding rule for {_target(op)} has {what} ranks "
                         f"{[len(t) for t in spec]} but the op's {what}s have ranks {ranks}")


def _tensor(text: str) -> tuple[str, ...]:
    text = text.strip()
    return tuple(text.split()) if " " in text else tuple(text)


def _names(text: str | Sequence[str]) -> frozenset[str]:
    if isinstance(text, str):
        return frozenset(text.replace(",", " ").split()) if " " in text or "," in text \
            else frozenset(text)
    return frozenset(text)


def parse_spec(spec: str, *, reduction: str | Sequence[str] = "",
               need_replication: str | Sequence[str] = "",
               permutation: str | Sequence[str] = "") -> FactorSpec:
    """Parse ``"ij,jk->ik"`` (or ``"b i j, b j k -> b i k"``) into a ``FactorSpec``."""
    if spec.count("->") != 1:
        raise ValueError(f"a sharding rule spec needs exactly one '->': {spec!r}")
    left, right = spec.split("->")
    operands = tuple(_tensor(t) for t in left.split(",")) if left.strip() else ()
    results = tuple(_tensor(t) for t in right.split(",")) if right.strip() else ()
    for tensor in (*operands, *results):
        if len(set(tensor)) != len(tensor):
            raise ValueError(f"a factor appears twice in one tensor of {spec!r}")
    parsed = FactorSpec(operands, results, _names(reduction), _names(need_replication),
                        _names(permutation))
    unknown = (parsed.reduction | parsed.need_replication | parsed.permutation) \
        - set(parsed.factors)
    if unknown:
        raise ValueError(f"factors {sorted(unknown)} are not in the spec {spec!r}")
    return parsed


# The registries: custom call target (or op name) -> rule function (mutable on
# purpose: users add to them).
_RULES: dict[str, RuleFunction] = {}
_OP_RULES: dict[str, RuleFunction] = {}
_generation = 0


def register_sharding_rule(target: str, rule: str | RuleFunction, *,
                           reduction: str | Sequence[str] = "",
                           need_replication: str | Sequence[str] = "",
                           permutation: str | Sequence[str] = "") -> None:
    """Use ``rule`` for every ``stablehlo.custom_call`` whose target is ``target``, or,
    when ``target`` names an MLIR op (``"chlo.lgamma"``), for every such op.

    ``rule`` is an einsum-like spec (see the module docstring) or a function
    ``rule(op) -> OpShardingRule``. Registering a target again replaces its rule;
    an op rule replaces shardc's own rule for that op, if it has one.
    """
    if isinstance(rule, str):
        spec = parse_spec(rule, reduction=reduction, need_replication=need_replication,
                          permutation=permutation)
        function: RuleFunction = spec.build
    elif callable(rule):
        function = rule
    else:
        raise TypeError(f"a sharding rule is a spec string or a function, got {type(rule)}")
    registry = _OP_RULES if is_op_name(target) else _RULES
    registry[target] = function
    _forget_cached_rules()


def is_op_name(target: str) -> bool:
    """Whether ``target`` is the name of an MLIR op shardc's context knows."""
    with make_context() as context:
        return context.is_registered_operation(target)


def unregister_sharding_rule(target: str) -> None:
    """Forget the rule registered for ``target`` (no error if there is none)."""
    _RULES.pop(target, None)
    _OP_RULES.pop(target, None)
    _forget_cached_rules()


def user_rule(op: ir.Operation) -> OpShardingRule | None:
    """The registered rule for ``op`` (a custom call by target, else by op name); None
    if nobody registered one."""
    is_call = "call_target_name" in op.attributes and op.name == "stablehlo.custom_call"
    if is_call:
        function = _RULES.get(ir.StringAttr(op.attributes["call_target_name"]).value)
    else:
        function = _OP_RULES.get(op.name)
    if function is None:
        return None
    rule = function(op)
    if not isinstance(rule, OpShardingRule):
        raise TypeError(f"the sharding rule for {_target(op)} returned {type(rule).__name__}, "
                        "not an OpShardingRule")
    if not is_call:
        return rule
    # Marked custom: the export keeps it on the op, so XLA's partitioner uses it too.
    return rule if rule.is_custom else dataclasses.replace(rule, is_custom=True)


def has_user_rules() -> bool:
    """Whether any rule was registered (the registry skips the look-up otherwise)."""
    return bool(_RULES or _OP_RULES)


def generation() -> int:
    """How many times the registered rules changed: rule caches key on it, so a
    registration invalidates every rule computed before it."""
    return _generation


def _forget_cached_rules() -> None:
    global _generation
    _generation += 1
