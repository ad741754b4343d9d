"""Import, propagate with user priorities, export (``sdy-propagation-pipeline``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from jaxlib.mlir import ir

from shardc.compiler.passes.base import option
from shardc.compiler.passes.propagate_common import PropagationOptions
from shardc.compiler.pipelines import ConflictResolution, propagation_pipeline


@dataclass(frozen=True)
class PropagationPipelinePass(PropagationOptions):
    """Run the import steps, user-priority propagation and the export steps

    Import: symbol DCE, inlining of calls, lifting inline meshes, removing
    size-one axes, splitting constants, manual-axes clean-up, data-flow
    edges, applying sharding constraints. Then user-priority propagation
    (aggressive factor propagation, op-priority rounds). Export: merging
    constants, sinking edges, removing sharding groups, constraints to
    reshards, divisible and sub-axis-free function I/O, closing every
    sharding, dropping rules. Differs from jaxlib's native pipeline in
    that calls are inlined and no explicit reshards are inserted.
    """

    name: ClassVar[str] = "shardc-propagation-pipeline"
    aliases: ClassVar[tuple[str, ...]] = ("sdy-propagation-pipeline",)
    upstream: ClassVar[str] = "sdy-propagation-pipeline"

    dedup_functions_fully: bool = option(
        False, help="accepted for compatibility; only false is implemented")
    conflict_resolution: ConflictResolution = option(
        ConflictResolution.SHARDY,
        help="how conflicts are resolved: 'shardy' (as Shardy) or 'cost-aware' (fewest bytes)")

    def run(self, module: ir.Operation) -> None:
        """Run the pipeline on ``module``."""
        propagation_pipeline(module, conservative=self.conservative_propagation,
                             keep_sharding_rules=self.keep_sharding_rules,
                             resolution=self.conflict_resolution)
