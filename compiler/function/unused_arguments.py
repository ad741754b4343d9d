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

An argument read only by sharding constraints nothing reads is unread too: jax's
lowering constrains every argument of an extended dtype (a typed PRNG key's data,
its trailing dimensions replicated: ``mlir.replicate_trailing_dims``), read or
not, where jax.jit's pruning, on the jaxpr, came before and left the key out.
"""

from __future__ import annotations

import dataclasses

from jaxlib.mlir import ir

from shardc.compiler.annotation import main_function
from shardc.compiler.function.annotated import copy_module
from shardc.compiler.sharding.walker import erase_unused_meshes, mesh_name_of
from shardc.compiler.stages.dead_constraints import CONSTRAINT, erase_dead_constraints
from shardc.dialects import sdy
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
    (which it never reads), their attributes and the dead constraints on them
    dropped with them."""
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
        constraints = [op for i in dropped for op in _readers(block.arguments[i])]
        named = {mesh_name_of(sdy.TensorShardingAttr(op.attributes["sharding"]))
                 for op in constraints}
        erase_dead_constraints(constraints)
        for i in sorted(dropped, reverse=True):
            block.erase_argument(i)
        # A mesh symbol only those constraints named goes with them, as it is absent
        # from jax.jit's lowering, which never had them.
        erase_unused_meshes(copy.operation, among=named)
    return copy


def _static(type_: ir.Type) -> bool:
    return not isinstance(type_, ir.ShapedType) or ir.ShapedType(type_).has_static_shape


def _unread(argument: ir.Value) -> bool:
    """Whether nothing reads ``argument`` but sharding constraints nothing reads."""
    return all(op.name == CONSTRAINT for op in _readers(argument))


def _readers(value: ir.Value) -> list[ir.Operation]:
    """The ops reading ``value`` and, through each constraint among them, the ops
    reading the constraint's result."""
    found: list[ir.Operation] = []
    for use in value.uses:
        op = use.owner.operation
        found.append(op)
        if op.name == CONSTRAINT:
            found.extend(_readers(op.result))
    return found
