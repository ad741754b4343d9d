"""Export shardc's propagated shardings so that XLA has nothing left to decide."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from jaxlib.mlir import ir

from shardc.compiler.passes.base import ModulePass, option
from shardc.compiler.passes.insert_explicit_reshards import insert_explicit_reshards
from shardc.compiler.stages import export_pipeline


def export(module: ir.Operation, *, keep_sharding_rules: bool = False) -> None:
    """Shardy's export steps with shardc's explicit reshards in their place."""
    with module.context:
        export_pipeline(
            module,
            keep_sharding_rules=keep_sharding_rules,
            explicit_reshards=insert_explicit_reshards,
        )


@dataclass(frozen=True)
class ExportPipelinePass(ModulePass):
    """Export propagated shardings: close them and make reshards explicit

    Run after propagation (``shardc-user-priority-propagate`` or the import
    steps plus propagation). Sinks data-flow edges, removes sharding groups,
    turns sharding constraints into ``sdy.reshard``, makes function
    boundary shardings divisible and free of sub-axes, closes every sharding
    (so XLA's own propagation cannot change any), inserts explicit reshards
    for conflicting ops (``shardc-insert-explicit-reshards``), erases dead
    ops and drops cached sharding rules. Afterwards every value XLA
    partitions has the sharding shardc decided.
    """

    name: ClassVar[str] = "shardc-export-pipeline"
    needs_mesh_symbols: ClassVar[bool] = True

    keep_sharding_rules: bool = option(False, help="keep sdy.sharding_rule attributes")

    def run(self, module: ir.Operation) -> None:
        """Export ``module``."""
        export(module, keep_sharding_rules=self.keep_sharding_rules)
