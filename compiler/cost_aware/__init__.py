"""Cost-aware propagation: Shardy-compatible propagation, then a greedy,
cost-model-driven resolution of its conflicts, exported as explicit shardings.

``cost_aware_pipeline(module)`` is the drop-in replacement of
``pipelines.propagation_pipeline`` (``resolution="cost-aware"``); see
``search`` for the algorithm and its bound, ``candidates`` for the conflicts and
the alternatives, and ``docs/cost-aware.md``.
"""

from __future__ import annotations

import io
import threading

from jaxlib.mlir import ir

from shardc.compiler.cost_aware.candidates import apply_pins, strip_tags, tag_ops
from shardc.compiler.cost_aware.explicit import constrain_changed_results, insert_operand_reshards
from shardc.compiler.cost_aware.search import Resolution, resolve
from shardc.compiler.diagnostics import verify_step
from shardc.compiler.stages import ImportCensus, export_pipeline, import_pipeline
from shardc.compiler.stages.export_steps import erase_dead_ops
from shardc.dialects.xla_form import keep_op_shardings


def _adopt_body(target: ir.Operation, source: ir.Operation) -> None:
    """Replace the ops of module ``target`` by those of module ``source`` (moved, not copied)."""
    block = target.regions[0].blocks[0]
    for op in list(block.operations):
        op.operation.erase()
    for op in list(source.regions[0].blocks[0].operations):
        block.append(op.operation)


class ShardyExport:
    """Shardy's choices (the imported module propagated without pins, written back),
    exported once, when first called: the bytecode ``Resolution.fallback`` gives.

    XLA may partition the search's choices differently from the cost model, so
    ``Lowered.compile`` compiles Shardy's choices too; a lowering that is never
    compiled (``as_text``, ``cost_analysis``, ``jax.export``) never exports them.
    """

    def __init__(self, module: ir.Operation, **export_options):
        self._module: ir.Operation | None = module
        self._options = export_options
        self._bytes: bytes | None = None
        self._lock = threading.Lock()  # compiles may ask from several threads

    @property
    def exported(self) -> bool:
        """Whether a call exported them already."""
        return self._bytes is not None

    def __call__(self) -> bytes:
        with self._lock:
            if self._bytes is None:
                module, self._module = self._module, None
                with module.context:
                    export_pipeline(module, **self._options)
                    strip_tags(module)
                    verify_step(module, "export of Shardy's choices")
                    buffer = io.BytesIO()
                    module.write_bytecode(buffer)
                self._bytes = buffer.getvalue()
        return self._bytes


def cost_aware_pipeline(module: ir.Operation, *, conservative: bool = False,
                        keep_sharding_rules: bool = False, max_evaluations: int = 32,
                        keep_constraints: bool = False, import_census: ImportCensus | None = None,
                        **search_options) -> Resolution:
    """Import (``import_census`` as in ``import_pipeline``), resolve conflicts by
    predicted bytes (``search.resolve`` takes ``search_options``), keep the propagated
    winner, export; when the search changed anything, ``Resolution.fallback`` gives
    Shardy's choices exported (``ShardyExport``)."""
    operation = module.operation
    with operation.context:
        import_pipeline(operation, import_census)
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
        memo = None if conservative else read.graph.memo
        del read
        resolution.reshards = insert_operand_reshards(operation, resolution.changed, memo)
        verify_step(operation, "insert_operand_reshards")
        constrain_changed_results(operation, resolution.changed)
        verify_step(operation, "constrain_changed_results")
        if resolution.changed:  # else XLA re-derives Shardy's choices from the same seeds
            keep_op_shardings(operation)
        strip_tags(operation)
        read, resolution.baseline_read = resolution.baseline_read, None
        if read is not None:
            # The safety net (``Lowered.compile`` compiles both): exported when compile()
            # first asks for it, not as part of the lowering.
            resolution.shardy_export = ShardyExport(
                read.graph.module, keep_sharding_rules=keep_sharding_rules,
                keep_constraints=keep_constraints)
            del read
    return resolution


__all__ = ["Resolution", "apply_pins", "cost_aware_pipeline", "resolve"]
