"""Shardy's whole pipeline (import, user-priority propagation, export), on a module or a copy.

A lowered JAX program carries shardings only on its arguments, results and
constraints; XLA decides the rest with Shardy's propagation pipeline.
``shardy_pipeline`` is shardc's equivalent, in place; ``propagated_copy`` runs
it on a clone, leaving the caller's module untouched, so that checks,
``explain`` and the communication report can read the sharding every value
will have.
"""

from __future__ import annotations

from jaxlib.mlir import ir

from shardc.compiler.diagnostics import verify_step
from shardc.compiler.propagation import (
    ShardingOrigins,
    cyclic_gc_paused,
    propagate,
    propagate_read,
)
from shardc.compiler.sharding import user_rules
from shardc.compiler.stages import (
    ImportCensus,
    PropagatedRead,
    export_pipeline,
    export_steps,
    import_pipeline,
)


def shardy_pipeline(module: ir.Operation, *, conservative: bool = False,
                    keep_sharding_rules: bool = False, keep_constraints: bool = False,
                    import_census: ImportCensus | None = None) -> None:
    """Import, user-priority propagation, export (``keep_constraints``
    as in ``export_pipeline``), in place; ``import_census`` as ``import_pipeline``'s
    ``census``."""
    operation = module.operation
    with operation.context:
        import_pipeline(operation, import_census)
        # Shardy keeps the rules it computed on every op for its export steps, then
        # drops all but the custom ones; no export step here reads them, so they
        # are written only when the caller keeps them or when users registered
        # rules (those are custom and stay).
        rules_kept = keep_sharding_rules or user_rules.has_user_rules()
        # The export stage takes its census from the propagation's read of the module
        # rather than walk it again. Collection stays paused while the read lives: the
        # first collection after it would scan all of it.
        with cyclic_gc_paused():
            graph, store = propagate_read(operation, plan="user-priority",
                                          conservative=conservative,
                                          keep_sharding_rules=rules_kept)
            verify_step(operation, "propagate")
            export_pipeline(operation, keep_sharding_rules=keep_sharding_rules,
                            keep_constraints=keep_constraints,
                            read=PropagatedRead(graph, store, rules_kept))
            del graph, store


def clone(module: ir.Module | ir.Operation) -> ir.Operation:
    """A detached deep copy of a ``builtin.module`` (locations included)."""
    return module.operation.clone()


def propagated_copy(module: ir.Module | ir.Operation, *, export: bool = True) -> ir.Operation:
    """A copy of ``module`` after Shardy's pipeline.

    With ``export=False`` the export steps (closing shardings, fixing
    indivisible function boundaries, dropping rules) are skipped, so the
    copy shows propagation's own result.
    """
    copy = clone(module)
    with copy.context:
        if export:
            shardy_pipeline(copy)
        else:
            import_pipeline(copy)
            propagate(copy, plan="user-priority")
    return copy


def propagated_copy_with_origins(
        module: ir.Module | ir.Operation) -> tuple[ir.Operation, ShardingOrigins]:
    """A copy of ``module`` after propagation (``export=False``) and its recorded origins.

    Returns ``(copy, origins)``: ``origins`` is the propagation engine's
    ``ShardingOrigins`` (which user sharding each axis came from), recorded
    while the copy was propagated, so it is exact for the copy. The copy also
    carries Shardy's ``sdy.sharding_origin_name`` on its constraints and
    manual computations, which name the ``constraint_k`` / ``mc_k`` origins.
    Only meaningful for a module that was not propagated before: axes a value
    already has are not re-recorded.
    """
    copy = clone(module)
    with copy.context:
        import_pipeline(copy)
        origins = propagate(copy, plan="user-priority", debug_sharding_origins=True,
                            record_origins=True)
        # Closed as the lowering's export closes them, so the shardings shown
        # are the final ones ("x" rather than the still-open "x", ?).
        export_steps.close_shardings(copy)
    return copy, origins
