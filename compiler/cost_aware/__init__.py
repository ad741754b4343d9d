"""Cost-aware propagation: Shardy-compatible propagation, then a greedy,
cost-model-driven resolution of its conflicts, exported as explicit shardings.

``cost_aware_pipeline(module)`` is the drop-in replacement of
``pipelines.propagation_pipeline`` (``resolution="cost-aware"``); see
``search`` for the algorithm and its bound, ``candidates`` for the conflicts and
the alternatives, and ``docs/cost-aware.md``.
"""

from __future__ import annotations

import io

from jaxlib.mlir import ir

from shardc.compiler.cost_aware.candidates import apply_pins, strip_tags, tag_ops
from shardc.compiler.cost_aware.explicit import constrain_changed_results, insert_operand_reshards
from shardc.compiler.cost_aware.search import Resolution, resolve
from shardc.compiler.diagnostics import verify_step
from shardc.compiler.stages import export_pipeline, import_pipeline
from shardc.compiler.stages.export_steps import erase_dead_ops
from shardc.dialects.xla_form import keep_op_shardings


def _adopt_body(target: ir.Operation, source: ir.Operation) -> None:
    """Replace the ops of module ``target`` by those of module ``source`` (moved, not copied)."""
    block = target.regions[0].blocks[0]
    for op in list(block.operations):
        op.operation.erase()
    for op in list(source.regions[0].blocks[0].operations):
        block.append(op.operation)


def cost_aware_pipeline(module: ir.Operation, *, conservative: bool = False,
                        keep_sharding_rules: bool = False, max_evaluations: int = 32,
                        keep_constraints: bool = False, **search_options) -> Resolution:
    """Import, resolve conflicts by predicted bytes (``search.resolve`` takes
    ``search_options``), keep the propagated winner, export; when the search changed
    anything, ``Resolution.fallback`` holds Shardy's choices exported."""
    operation = module.operation
    with operation.context:
        import_pipeline(operation)
        tag_ops(operation)
        verify_step(operation, "tag_ops")
        # Propagation erases the ops the program leaves dead: erased once here, every
        # copy the search propagates is one module read once (``PinnedCopies``).
        erase_dead_ops(operation)
        resolution = resolve(operation.clone(), conservative=conservative,
                             max_evaluations=max_evaluations, **search_options)
        # The search already propagated the imported module with the pins it kept; the
        # ops move with their read, so the export takes its census from it (no walk).
        read, resolution.read = resolution.read, None
        _adopt_body(operation, read.graph.module)
        verify_step(operation, "resolve")
        export_pipeline(operation, keep_sharding_rules=keep_sharding_rules,
                        keep_constraints=keep_constraints, read=read)
        del read
        resolution.reshards = insert_operand_reshards(operation, resolution.changed)
        verify_step(operation, "insert_operand_reshards")
        constrain_changed_results(operation, resolution.changed)
        verify_step(operation, "constrain_changed_results")
        if resolution.changed:  # else XLA re-derives Shardy's choices from the same seeds
            keep_op_shardings(operation)
        strip_tags(operation)
        read, resolution.baseline_read = resolution.baseline_read, None
        if read is not None:
            # The safety net: XLA may partition the search's choices differently
            # from the cost model (``Lowered.compile`` compares both compiled).
            baseline = read.graph.module
            export_pipeline(baseline, keep_sharding_rules=keep_sharding_rules,
                            keep_constraints=keep_constraints, read=read)
            del read
            strip_tags(baseline)
            verify_step(baseline, "export of Shardy's choices")
            buffer = io.BytesIO()
            baseline.write_bytecode(buffer)
            resolution.fallback = buffer.getvalue()
    return resolution


__all__ = ["Resolution", "apply_pins", "cost_aware_pipeline", "resolve"]
