"""Zoo and bench/models programs as the cost-aware search starts from them: lowered
without propagation, through the import stage, every op numbered (``tag_ops``)."""

from jaxlib.mlir import ir

from bench import e2e_measure
from bench.models import REGISTRY
from shardc.compiler.cost_aware.candidates import tag_ops
from shardc.compiler.stages import import_pipeline
from shardc.dialects import make_context


def imported(name: str) -> ir.Module:
    """Program ``name`` (small size) after the import stage, its ops numbered."""
    program = REGISTRY[name]("small")
    jitted, args, _ = e2e_measure.prepare(program, "shardc")
    module = ir.Module.parse(jitted.lower(*args, propagate=False).as_text(), make_context())
    with module.context:
        import_pipeline(module.operation)
        tag_ops(module.operation)
    return module
