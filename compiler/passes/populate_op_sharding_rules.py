"""Attach each op's sharding rule as ``sdy.sharding_rule`` (rules tested apart from propagation)."""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import ClassVar

from jaxlib.mlir import ir

from shardc.compiler.diagnostics import emit_warning
from shardc.compiler.passes.base import ModulePass, option
from shardc.compiler.sharding.rules import (
    SHARDING_RULE_ATTR,
    UnknownOpShardingRuleWarning,
    rule_for,
)
from shardc.compiler.sharding.walker import ops_in_preorder


def populate_op_sharding_rules(module: ir.Operation, *, conservative: bool = False) -> None:
    """Set ``sdy.sharding_rule`` on every op (nested ones too) that has a rule.

    A rule already attached is kept as is. Ops unknown to the registry get a
    warning at the op, once per op name (or custom call target) per process.
    """
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", UnknownOpShardingRuleWarning)
        for op in ops_in_preorder(module):
            if SHARDING_RULE_ATTR in op.attributes:
                continue
            seen = len(caught)
            rule = rule_for(op, conservative)
            for warning in caught[seen:]:
                emit_warning(op, str(warning.message))
            if rule is not None:
                op.attributes[SHARDING_RULE_ATTR] = rule.to_attr(op.context)


@dataclass(frozen=True)
class PopulateOpShardingRulesPass(ModulePass):
    """Attach the op sharding rule of every op as sdy.sharding_rule

    Reads each op's shapes and attributes (and, for concatenate,
    dynamic_update_slice and custom_call X64Combine, its neighbours). Writes
    ``sdy.sharding_rule = #sdy.op_sharding_rule<...>`` on every op the rule
    registry (``shardc.compiler.sharding.rules``) has a rule for, printed as
    Shardy prints it; ops that already carry a rule keep it. Ops without a rule
    on purpose (constants, while, case, ...) are left alone; unknown ops get a
    warning. Shardings are not read or changed.
    """

    name: ClassVar[str] = "shardc-populate-op-sharding-rules"
    aliases: ClassVar[tuple[str, ...]] = ("sdy-populate-op-sharding-rules",)
    upstream: ClassVar[str] = "sdy-populate-op-sharding-rules"

    conservative_propagation: bool = option(
        False, help="build the conservative rules (no propagation through sliced or windowed dims)"
    )

    def run(self, module: ir.Operation) -> None:
        """Populate the rules of ``module``."""
        populate_op_sharding_rules(module, conservative=self.conservative_propagation)
