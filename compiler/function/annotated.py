"""jax's module with shardc's shardings written on it, and propagated.

``annotated_copy`` copies jax's lowered module and writes shardc's meshes,
shardings, layouts, memory kinds and donation on the copy; ``propagate`` runs
the propagation pipeline on it, verified once, and when the result is invalid
replays it step by step from ``Unpropagated`` (the module propagation started
from, made again only when asked for) so that the error names the broken step.
"""

from __future__ import annotations

from collections.abc import Sequence

from jaxlib.mlir import ir

from shardc.compiler import annotation, effects, layouts, memories
from shardc.compiler.cost_aware import Resolution
from shardc.compiler.diagnostics import (
    steps_verified,
    verify_module,
    verify_step,
    verifying_steps,
)
from shardc.compiler.pipelines import propagation_pipeline
from shardc.compiler.signature import LeafSignature
from shardc.compiler.stages import ImportCensus, xla_import_rewrites
from shardc.dialects.errors import InternalError
from shardc.runtime.effects import ProgramEffects


class Unpropagated:
    """The module propagation starts from (jax's, annotated, as XLA's import rewrites
    it), made again from jax's module the first time it is asked for, by the very
    steps the lowering took: explain() and the replay that names a broken step
    want it, and most lowerings never do (a copy at every lowering costs a tenth
    of the stages' time on a small program). ``annotated()`` copies the module before
    those rewrites: jax.jit's lowered module, what ``Lowered.as_text()`` prints."""

    def __init__(self, jax_module: ir.Module, args: Sequence[LeafSignature],
                 results: Sequence[LeafSignature], devices: tuple | None,
                 program_effects: ProgramEffects) -> None:
        self._made = (jax_module, args, results, devices, program_effects)
        self._annotated: ir.Module | None = None
        self._module: ir.Module | None = None

    def annotated(self) -> ir.Module:
        """A new copy of jax's module with the given shardings written on it."""
        return copy_module(self._annotated_module())

    def __call__(self) -> ir.Operation:
        if self._module is None:
            self._module = self.annotated()
            with self._module.context, ir.Location.unknown():
                xla_import_rewrites(self._module.operation)
        return self._module.operation

    def _annotated_module(self) -> ir.Module:
        if self._annotated is None:
            jax_module, args, results, devices, program_effects = self._made
            with jax_module.context, ir.Location.unknown():
                self._annotated, _ = annotated_copy(jax_module, args, results, devices,
                                                program_effects)
        return self._annotated


def annotated_copy(jax_module: ir.Module, args: Sequence[LeafSignature],
               results: Sequence[LeafSignature], devices: tuple | None,
               program_effects: ProgramEffects,
               ) -> tuple[ir.Module, annotation.MeshSymbols]:
    """A copy of jax's module with shardc's meshes, shardings and donation written on
    it, and its mesh symbols (in the module's context); ``args`` and ``results`` are
    ``@main``'s after its tokens (``effects.program_values``)."""
    module = copy_module(jax_module)
    symbols = annotation.annotate(module, args, results, devices, tokens=program_effects.tokens,
                                  writes=program_effects.writes or ())
    offsets = annotation.user_offsets(module, program_effects.tokens)
    layouts.write_layouts(module, args, results, offsets)
    memories.write_memory_kinds(module, args, results, offsets)
    verify_step(module.operation, "annotate")
    effects.check_device_count(program_effects, symbols.device_count())
    return module, symbols


def propagate(module: ir.Module, unpropagated: Unpropagated, propagation: str,
               census: ImportCensus | None) -> Resolution | None:
    """Run the propagation pipeline (``census``: the module's import census, which
    ``xla_import_rewrites`` took); return the cost-aware search's ``Resolution``
    (None for Shardy's propagation).

    The result is verified once. A module the pipeline made invalid is replayed
    from ``unpropagated`` with every step verified, so that the
    ``InternalError`` names the step that broke it.
    """
    try:
        resolution = propagation_pipeline(module.operation, resolution=propagation,
                                          keep_constraints=True, import_census=census)
        verify_module(module.operation, "the propagation pipeline")
    except InternalError:
        if not steps_verified():
            with verifying_steps():
                propagation_pipeline(unpropagated().clone(),
                                     resolution=propagation, keep_constraints=True)
        raise
    return resolution


def copy_module(source: ir.Module) -> ir.Module:
    """A copy of ``source`` in its context: a new module with its attributes and a
    clone of each of its ops (a tenth of the cost of a copy through bytecode)."""
    with source.context:
        copy = ir.Module.create(source.operation.location)
        attributes, source_attributes = copy.operation.attributes, source.operation.attributes
        for name in source_attributes:
            attributes[name] = source_attributes[name]
        body = ir.InsertionPoint(copy.body)
        for op in source.body.operations:
            op.operation.clone(body)
    return copy
