"""Arguments a program never reads, left out of what XLA compiles, as ``jax.jit``
leaves them out unless told ``keep_unused=True``.

jax prunes them from its executable (``pxla._dce_jaxpr``): a call neither places
nor passes them, so host data given for them is never transferred, and the
compiled program reports no sharding or layout for them (``None``). shardc's
lowering keeps every argument (its module, explanations and reports are per
argument); only the copy XLA compiles drops those ``@main`` never reads, and the
module as lowered that ``Lowered.as_text()`` shows, as jax.jit's lowering does.

Programs with ordered effects or ``Ref``s keep every argument here (their tokens
and buffers are threaded by position), and so do programs with dynamic shapes
(their dimension sizes are read from the arguments), as in jax. Unordered effects
(``jax.debug.print``, an unordered host callback) thread nothing by position:
jax prunes those programs' arguments as any other's.
"""

from __future__ import annotations

import dataclasses

from jaxlib.mlir import ir

from shardc.compiler.annotation import main_function
from shardc.compiler.function.annotated import copy_module
from shardc.runtime.effects import NO_EFFECTS, ProgramEffects

ARG_ATTRS = "arg_attrs"


def unused(module: ir.Module, effects: ProgramEffects, num_args: int) -> tuple[int, ...]:
    """The positions among the call's ``num_args`` argument leaves of those ``@main``
    never reads (none for a program with ordered effects, ``Ref``s or dynamic
    shapes)."""
    if dataclasses.replace(effects, unordered=False) != NO_EFFECTS:
        return ()
    arguments = main_function(module).regions[0].blocks[0].arguments
    if len(arguments) != num_args or not all(_static(a.type) for a in arguments):
        return ()
    return tuple(i for i, argument in enumerate(arguments) if _unread(argument))


def without(module: ir.Module, dropped: tuple[int, ...]) -> ir.Module:
    """A copy of ``module`` whose ``@main`` takes none of the arguments at ``dropped``
    (which it never reads), their attributes dropped with them."""
    copy = copy_module(module)
    with module.context:
        main = main_function(copy)
        block = main.regions[0].blocks[0]
        function_type = ir.FunctionType(ir.TypeAttr(main.attributes["function_type"]).value)
        kept = [i for i in range(len(block.arguments)) if i not in set(dropped)]
        main.attributes["function_type"] = ir.TypeAttr.get(ir.FunctionType.get(
            [function_type.inputs[i] for i in kept], list(function_type.results)))
        if ARG_ATTRS in main.attributes:
            attrs = ir.ArrayAttr(main.attributes[ARG_ATTRS])
            main.attributes[ARG_ATTRS] = ir.ArrayAttr.get([attrs[i] for i in kept])
        for i in sorted(dropped, reverse=True):
            block.erase_argument(i)
    return copy


def _static(type_: ir.Type) -> bool:
    return not isinstance(type_, ir.ShapedType) or ir.ShapedType(type_).has_static_shape


def _unread(argument: ir.Value) -> bool:
    return next(iter(argument.uses), None) is None
