"""The registry of shardc passes: ``ALL_PASSES``, one alphabetical tuple of classes.

This tuple is the only list. Names and aliases live in the classes; the lookup
map below is derived from them and refuses duplicates at import time.
"""

from __future__ import annotations

from shardc.compiler.passes.add_data_flow_edges import AddDataFlowEdgesPass
from shardc.compiler.passes.aggressive_propagate import AggressivePropagatePass
from shardc.compiler.passes.base import ModulePass
from shardc.compiler.passes.basic_propagate import BasicPropagatePass
from shardc.compiler.passes.capture_loop_invariants import CaptureLoopInvariantsPass
from shardc.compiler.passes.check_shardings import CheckShardingsPass
from shardc.compiler.passes.close_shardings import CloseShardingsPass
from shardc.compiler.passes.drop_shardings import DropShardingsPass
from shardc.compiler.passes.erase_dead_constraints import EraseDeadConstraintsPass
from shardc.compiler.passes.export_pipeline import ExportPipelinePass
from shardc.compiler.passes.fold_identities import FoldIdentitiesPass
from shardc.compiler.passes.insert_explicit_reshards import InsertExplicitReshardsPass
from shardc.compiler.passes.lift_inlined_meshes import LiftInlinedMeshesPass
from shardc.compiler.passes.op_priority_propagate import OpPriorityPropagatePass
from shardc.compiler.passes.populate_op_sharding_rules import PopulateOpShardingRulesPass
from shardc.compiler.passes.propagation_pipeline import PropagationPipelinePass
from shardc.compiler.passes.sink_data_flow_edges import SinkDataFlowEdgesPass
from shardc.compiler.passes.user_priority_propagate import UserPriorityPropagatePass
from shardc.compiler.passes.xla_form import XlaFormPass

ALL_PASSES: tuple[type[ModulePass], ...] = (
    AddDataFlowEdgesPass,
    AggressivePropagatePass,
    BasicPropagatePass,
    CaptureLoopInvariantsPass,
    CheckShardingsPass,
    CloseShardingsPass,
    DropShardingsPass,
    EraseDeadConstraintsPass,
    ExportPipelinePass,
    FoldIdentitiesPass,
    InsertExplicitReshardsPass,
    LiftInlinedMeshesPass,
    OpPriorityPropagatePass,
    PopulateOpShardingRulesPass,
    PropagationPipelinePass,
    SinkDataFlowEdgesPass,
    UserPriorityPropagatePass,
    XlaFormPass,
)


def _by_name(classes: tuple[type[ModulePass], ...]) -> dict[str, type[ModulePass]]:
    table: dict[str, type[ModulePass]] = {}
    for pass_class in classes:
        for name in (pass_class.name, *pass_class.aliases):
            if name in table:
                raise RuntimeError(f"pass name '{name}' is declared twice")
            table[name] = pass_class
    return table


PASSES_BY_NAME: dict[str, type[ModulePass]] = _by_name(ALL_PASSES)
