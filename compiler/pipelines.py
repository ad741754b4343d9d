"""The propagation pipeline, and the one choice of how it resolves conflicts.

``propagation_pipeline(module)`` is Shardy's ``sdy-propagation-pipeline`` with
``dedup-functions-fully=false``: the import stage (``shardc.compiler.stages``),
user-priority propagation (``shardc.compiler.propagation``), the export stage.
Deliberate differences, listed in ``PIPELINE_DIFFERENCES``: calls are inlined
(also inside while/case bodies) instead of Shardy's flatten-call-graph /
import-func-calls / export-named-computations round trip, and explicit
reshards are not inserted (``export_pipeline(explicit_reshards=...)`` is the
seam where they go).

``ConflictResolution`` names how conflicts between shardings are resolved:
``shardy`` as Shardy does, or ``cost-aware`` by predicted collective bytes
(``shardc.compiler.cost_aware``). ``jit(propagation=...)``, the pipeline pass's
``conflict-resolution`` option and this module all take its values.
"""

from __future__ import annotations

import enum

from jaxlib.mlir import ir

from shardc.compiler.cost_aware import Resolution, cost_aware_pipeline
from shardc.compiler.stages import ImportCensus
from shardc.compiler.stages.shardy_pipeline import shardy_pipeline

PIPELINE_DIFFERENCES = (
    "func.call ops are inlined (inline_calls) instead of becoming named computations",
    "sdy-insert-explicit-reshards is skipped: no sdy.reshard is inserted for conflicts",
    "sharding-group import only syncs groups (no id renumbering or dedupe)",
)


class ConflictResolution(enum.Enum):
    """How the propagation pipeline resolves conflicts between shardings."""

    SHARDY = "shardy"
    COST_AWARE = "cost-aware"

    @classmethod
    def parse(cls, value: ConflictResolution | str) -> ConflictResolution:
        """The member named by ``value`` (a member or its string); ValueError otherwise."""
        try:
            return cls(value)
        except ValueError:
            known = ", ".join(repr(m.value) for m in cls)
            raise ValueError(f"unknown conflict resolution {value!r}; known: {known}") from None


def propagation_pipeline(module: ir.Operation, *, conservative: bool = False,
                         keep_sharding_rules: bool = False,
                         resolution: ConflictResolution | str = ConflictResolution.SHARDY,
                         keep_constraints: bool = False,
                         import_census: ImportCensus | None = None) -> Resolution | None:
    """Import, user-priority propagation, export (``keep_constraints``
    as in ``export_pipeline``; ``import_census``, the module's, where a walk made
    before took it: see ``import_pipeline``).

    ``resolution="cost-aware"`` resolves Shardy's conflicts by predicted
    collective bytes instead and returns the search's ``Resolution``;
    otherwise None.
    """
    if ConflictResolution.parse(resolution) is ConflictResolution.COST_AWARE:
        return cost_aware_pipeline(module, conservative=conservative,
                                   keep_sharding_rules=keep_sharding_rules,
                                   keep_constraints=keep_constraints,
                                   import_census=import_census)
    shardy_pipeline(module, conservative=conservative, keep_sharding_rules=keep_sharding_rules,
                    keep_constraints=keep_constraints, import_census=import_census)
    return None
