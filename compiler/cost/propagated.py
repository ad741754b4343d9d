"""Run shardc's propagation on a copy of a module, then predict its communication.

A lowered JAX program carries shardings only on its arguments, results and
constraints; XLA decides the rest with Shardy's propagation pipeline.
``propagated_copy`` runs shardc's Python equivalent
(``shardc.compiler.propagation.pipeline``) on a clone, leaving the caller's
module untouched, and ``predict_collectives`` reads the communication report
off that copy: every value then has the sharding XLA will give it.
"""

from __future__ import annotations

from jaxlib.mlir import ir

from shardc.compiler.cost.report import CommReport, comm_report


def clone(module: ir.Module | ir.Operation) -> ir.Operation:
    """A detached deep copy of a ``builtin.module`` (locations included)."""
    return module.operation.clone()


def propagated_copy(module: ir.Module | ir.Operation, *, export: bool = True) -> ir.Operation:
    """A copy of ``module`` after shardc's propagation pipeline.

    With ``export=False`` the export steps (closing shardings, fixing
    indivisible function boundaries, dropping rules) are skipped, so the
    copy shows propagation's own result.
    """
    from shardc.compiler.propagation import propagate
    from shardc.compiler.propagation.pipeline import import_pipeline, propagation_pipeline

    copy = clone(module)
    with copy.context:
        if export:
            propagation_pipeline(copy)
        else:
            import_pipeline(copy)
            propagate(copy, strategy="user-priority")
    return copy


def propagated_copy_with_origins(module: ir.Module | ir.Operation):
    """A copy of ``module`` after propagation (``export=False``) and its recorded origins.

    Returns ``(copy, origins)``: ``origins`` is the propagation engine's
    ``ShardingOrigins`` (which user sharding each axis came from), recorded
    while the copy was propagated, so it is exact for the copy. The copy also
    carries Shardy's ``sdy.sharding_origin_name`` on its constraints and
    manual computations, which name the ``constraint_k`` / ``mc_k`` origins.
    Only meaningful for a module that was not propagated before: axes a value
    already has are not re-recorded.
    """
    from shardc.compiler.propagation import export_steps, propagate
    from shardc.compiler.propagation.pipeline import import_pipeline

    copy = clone(module)
    with copy.context:
        import_pipeline(copy)
        origins = propagate(copy, strategy="user-priority", debug_sharding_origins=True,
                            record_origins=True)
        # Closed as the lowering's export closes them, so the shardings shown
        # are the final ones ("x" rather than the still-open "x", ?).
        export_steps.close_shardings(copy)
    return copy, origins


def predict_collectives(module: ir.Module | ir.Operation) -> CommReport:
    """The collectives XLA will need for ``module``, after propagating a copy of it."""
    return comm_report(propagated_copy(module, export=False), missing_as_replicated=True)
