"""The data-flow ops: how values flow through ops that only pass them on.

Shardy describes these ops by an interface (``ShardableDataFlowOpInterface``);
here it is a table. Each result of such an op (and each block argument of a
named or manual computation) owns a *data-flow edge*: one sharding shared by the
values that flow into it (its sources) and by the values that are the same
value inside the op's regions (its targets). The import stage adds an
``sdy.data_flow_edge`` per owner, the engine finds an edge's sources and the
edge a use feeds from this table, and the export stage sinks the edges back.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class DataFlowOp:
    """How values flow through one kind of op (index ``i`` to index ``i``)."""

    # Operand i flows into result i (while's init values, optimization_barrier's operands).
    results_from_operands: bool
    # Operand i flows into block argument i of region 0, which owns an edge too.
    block_args_from_operands: bool
    # The regions whose terminator's operand i flows into result i (None: every region).
    returning_regions: tuple[int, ...] | None
    # Every region's block argument i is result i inside the op (a loop's carries).
    block_args_are_results: bool


DATA_FLOW_OPS: dict[str, DataFlowOp] = {
    "stablehlo.while": DataFlowOp(True, False, (1,), True),  # the body returns, not the condition
    "stablehlo.case": DataFlowOp(False, False, None, False),
    "stablehlo.optimization_barrier": DataFlowOp(True, False, (), False),
    "sdy.named_computation": DataFlowOp(False, True, (0,), False),
    "sdy.manual_computation": DataFlowOp(False, True, (0,), False),
}

#: Ops whose block arguments own data-flow edges.
BLOCK_ARG_OWNER_OPS = frozenset(
    name for name, flow in DATA_FLOW_OPS.items() if flow.block_args_from_operands)
