"""The propagation pipeline: import steps, user-priority propagation, export steps.

``propagation_pipeline(module)`` is Shardy's ``sdy-propagation-pipeline``
(spec 7.6, 7.7) with ``dedup-functions-fully=false``, built from the step
functions of ``import_steps``, ``data_flow_edges`` and ``export_steps``.
Deliberate differences, documented in ``PIPELINE_DIFFERENCES``: calls are
inlined (``inline_calls``, also inside while/case bodies) instead of Shardy's
flatten-call-graph / import-func-calls / export-named-computations round
trip, and ``sdy-insert-explicit-reshards`` is not run (``export_pipeline(explicit_reshards=...)``
is the seam where it goes).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from jaxlib.mlir import ir, passmanager

from shardc.compiler.diagnostics import verify_step
from shardc.compiler.propagation import export_steps, import_steps, propagate
from shardc.compiler.propagation.data_flow_edges import add_data_flow_edges, sink_data_flow_edges
from shardc.compiler.propagation.apply_constraints import apply_sharding_constraints
from shardc.compiler.propagation.inline_calls import inline_all_calls

PIPELINE_DIFFERENCES = (
    "func.call ops are inlined (inline_calls) instead of becoming named computations",
    "sdy-insert-explicit-reshards is skipped: no sdy.reshard is inserted for conflicts",
    "sharding-group import only syncs groups (no id renumbering or dedupe)",
)


def _generic(module: ir.Operation, pipeline: str) -> None:
    passmanager.PassManager.parse(f"builtin.module({pipeline})", module.context).run(module)


def main_func(module: ir.Operation) -> ir.Operation | None:
    """The single function, or the one named ``main``."""
    funcs = [op.operation for op in module.regions[0].blocks[0].operations
             if op.operation.name == "func.func"]
    if len(funcs) == 1:
        return funcs[0]
    for func in funcs:
        if ir.StringAttr(func.attributes["sym_name"]).value == "main":
            return func
    return None


def symbol_dce(module: ir.Operation) -> None:
    """MLIR's ``symbol-dce``: drop functions nothing calls."""
    _generic(module, "symbol-dce")


def remove_sub_axes_in_main_io_shardings(module: ir.Operation) -> None:
    """``export_steps.remove_sub_axes_in_io_shardings`` on the main function."""
    export_steps.remove_sub_axes_in_io_shardings(module, main_func(module))


def run_steps(module: ir.Operation, steps: Sequence[Callable[[ir.Operation], object]]) -> None:
    """Run each step on ``module``, verifying after each when step verification is on."""
    for step in steps:
        step(module)
        verify_step(module, step.__name__)


def import_pipeline(module: ir.Operation) -> None:
    """Spec 7.6 with calls inlined."""
    # Imported here: the passes package imports this module.
    from shardc.compiler.passes.lift_inlined_meshes import lift_inlined_meshes

    run_steps(module, (
        symbol_dce,
        inline_all_calls,
        symbol_dce,
        lift_inlined_meshes,
        import_steps.remove_size_one_axes,
        import_steps.constant_or_scalar_splitter,
        import_steps.manual_axes_cleanup,
        add_data_flow_edges,
        apply_sharding_constraints,
    ))


def export_pipeline(
    module: ir.Operation,
    *,
    keep_sharding_rules: bool = False,
    explicit_reshards: Callable[[ir.Operation], None] | None = None,
    keep_constraints: bool = False,
) -> None:
    """Spec 7.7; ``explicit_reshards`` runs where Shardy inserts explicit reshards.

    The propagation pipeline passes none, like jaxlib's native pipeline for the
    programs we compared; ``shardc-export-pipeline`` passes
    ``insert_explicit_reshards``. ``keep_constraints`` leaves the (closed)
    ``sdy.sharding_constraint`` ops where Shardy turns them into ``sdy.reshard``:
    the same reshard for XLA, and a lowering that reads like jax.jit's, where
    every ``with_sharding_constraint`` is a constraint.
    """
    run_steps(module, (
        export_steps.constant_or_scalar_merger,
        sink_data_flow_edges,
        export_steps.remove_sharding_groups,
        *(() if keep_constraints else (export_steps.sharding_constraint_to_reshard,)),
        export_steps.update_non_divisible_io_shardings,
        remove_sub_axes_in_main_io_shardings,
        export_steps.close_shardings,
        *((explicit_reshards,) if explicit_reshards is not None else ()),
        export_steps.erase_dead_ops,
        *(() if keep_sharding_rules else (export_steps.drop_sharding_rules,)),
    ))


STRATEGIES = ("shardy", "cost-aware")


def propagation_pipeline(module: ir.Operation, *, conservative: bool = False,
                         keep_sharding_rules: bool = False, strategy: str = "shardy",
                         keep_constraints: bool = False):
    """Import, user-priority propagation (rules kept), export (``keep_constraints``
    as in ``export_pipeline``).

    ``strategy="cost-aware"`` resolves Shardy's conflicts by predicted
    collective bytes instead (``shardc.compiler.cost_aware``) and returns the
    search's ``Resolution``; otherwise None.
    """
    # --- cost-aware strategy (issue 12) ---
    if strategy not in STRATEGIES:
        raise ValueError(f"unknown propagation strategy {strategy!r}; known: {STRATEGIES}")
    if strategy == "cost-aware":
        from shardc.compiler.cost_aware import cost_aware_pipeline

        return cost_aware_pipeline(module, conservative=conservative,
                                   keep_sharding_rules=keep_sharding_rules,
                                   keep_constraints=keep_constraints)
    # --- end cost-aware strategy ---
    operation = module.operation
    with operation.context:
        import_pipeline(operation)
        propagate(operation, strategy="user-priority", conservative=conservative,
                  keep_sharding_rules=True)
        verify_step(operation, "propagate")
        export_pipeline(operation, keep_sharding_rules=keep_sharding_rules,
                        keep_constraints=keep_constraints)
    return None
