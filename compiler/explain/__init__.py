"""Explain and inspect: why every tensor is sharded as it is, and what it costs.

``explain(module)`` returns an ``ExplainTable`` (``table``): one row per value
with its op and source line, shape, final sharding, per-device shard shape and
bytes, the user sharding each mesh axis came from (``origins``) and the
collectives its consumers need; as text, JSON or one HTML page (``html``).
``memory_estimate(module)`` (``memory``) adds up per-device bytes of
arguments, outputs and the live peak of intermediates before anything is
compiled. ``grid`` draws which device holds which shard, for module values
and for ``jax.Array``s. ``Lowered.explain()`` / ``Lowered.memory_estimate()``
and ``shardc-opt --explain`` are thin layers over these functions.
"""

from __future__ import annotations

from collections.abc import Sequence

from jaxlib.mlir import ir

from shardc.compiler.explain.grid import ShardGrid, grid_of_array, grid_of_sharding, visualize
from shardc.compiler.explain.memory import MemoryEstimate, estimate_memory
from shardc.compiler.explain.table import CollectiveNeed, ExplainRow, ExplainTable, build_table
from shardc.compiler.stages.hlo_order import restore_jax_order
from shardc.compiler.stages.shardy_pipeline import propagated_copy, propagated_copy_with_origins
from shardc.dialects.sdy import SHARDING_ATTR


def explain(module: ir.Module | ir.Operation, *, propagate: bool = True,
            user_args: Sequence[bool] | None = None,
            user_results: Sequence[bool] | None = None) -> ExplainTable:
    """The explain table of ``module`` (unchanged).

    With ``propagate`` shardc's propagation runs on a copy first, as for
    ``Lowered.comm_report()``. If ``module`` was not propagated yet, that run
    records each axis's origin (``origin_method`` "recorded", exact);
    otherwise (``Lowered.module``, propagated when lowered) the origins are
    derived after the fact by a graph search (``origin_method`` "derived"). ``user_args`` / ``user_results`` say which
    arguments and results of the main function the user sharded (default:
    those with a sharding in ``module`` as given).
    """
    operation = module.operation
    target, recorded = operation, None
    if propagate and not _propagated(operation):
        # Exact origins: the propagation engine records them while it runs.
        target, recorded = propagated_copy_with_origins(operation)
    elif propagate:
        # Already propagated (``Lowered.module``): its pre-propagation form is
        # gone, so the origins are derived (``origins.derive_origins``).
        target = propagated_copy(operation, export=False)
    if target is not operation:
        # Propagated in XLA's order (a module jit rewrote as XLA's import does), read
        # in jax's; the recorded origins hold ops as keys: their tags stay.
        restore_jax_order(target, keep_tags=True)
    return build_table(target, user_args=user_args, user_results=user_results,
                       seeds_from=operation, recorded=recorded)


def _propagated(module: ir.Operation) -> bool:
    """Whether propagation (or export) already ran: a non-``sdy`` op in a function
    body carries a sharding, or a constraint was exported as ``sdy.reshard``."""
    found = False

    def visit(op):
        nonlocal found
        name = op.name
        if name == "sdy.reshard" or (
                not name.startswith(("sdy.", "func.", "builtin."))
                and SHARDING_ATTR in op.attributes):
            found = True
            return ir.WalkResult.INTERRUPT
        return ir.WalkResult.ADVANCE

    module.walk(visit)
    return found


def memory_estimate(module: ir.Module | ir.Operation, *, propagate: bool = True,
                    arg_names: tuple[str, ...] | None = None,
                    platform: str = "cpu") -> MemoryEstimate:
    """Per-device bytes of ``module`` before compiling (see ``memory``) as XLA lays
    them out on ``platform`` ("cpu" or "tpu"); ``arg_names`` name the donated
    arguments in the list of aliased buffers."""
    operation = module.operation
    if propagate:
        operation = propagated_copy(operation, export=False)
    return estimate_memory(operation, arg_names=arg_names, platform=platform)


__all__ = [
    "CollectiveNeed",
    "ExplainRow",
    "ExplainTable",
    "MemoryEstimate",
    "ShardGrid",
    "estimate_memory",
    "explain",
    "grid_of_array",
    "grid_of_sharding",
    "memory_estimate",
    "visualize",
]
