"""Cost-aware propagation (issue 12): Shardy-compatible propagation, then a greedy,
cost-model-driven resolution of its conflicts, exported as explicit shardings.

``cost_aware_pipeline(module)`` is the drop-in replacement of
``propagation.pipeline.propagation_pipeline`` (``strategy="cost-aware"``); see
``search`` for the algorithm and its bound, ``candidates`` for the conflicts and
the alternatives, and ``docs/cost-aware.md``.
"""

from __future__ import annotations

from jaxlib.mlir import ir

from shardc.compiler.cost_aware.candidates import strip_tags, tag_ops
from shardc.compiler.cost_aware.explicit import insert_operand_reshards
from shardc.compiler.cost_aware.search import Resolution, apply_pins, resolve

LAST: list[Resolution] = []  # the latest resolution (for the bench and tests)


def cost_aware_pipeline(module: ir.Operation, *, conservative: bool = False,
                        keep_sharding_rules: bool = False, max_evaluations: int = 32,
                        ) -> Resolution:
    """Import, resolve conflicts by predicted bytes, propagate with the pins, export."""
    from shardc.compiler.propagation import propagate
    from shardc.compiler.propagation.pipeline import export_pipeline, import_pipeline

    operation = module.operation
    with operation.context:
        import_pipeline(operation)
        tag_ops(operation)
        resolution = resolve(operation.clone(), conservative=conservative,
                             max_evaluations=max_evaluations)
        apply_pins(operation, resolution.pins)
        propagate(operation, strategy="user-priority", conservative=conservative,
                  keep_sharding_rules=True)
        export_pipeline(operation, keep_sharding_rules=keep_sharding_rules)
        resolution.reshards = insert_operand_reshards(operation, resolution.changed)
        strip_tags(operation)
    LAST[:] = [resolution]
    return resolution


__all__ = ["Resolution", "apply_pins", "cost_aware_pipeline", "resolve"]
