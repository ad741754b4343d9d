"""jax's high-level ("hijax") types through shardc's jit.

A hijax type (``jax.experimental.hijax``'s ``Box``, a user ``HiType`` such as a
quantized array, a tuple type) is one value to the traced program that jax
lowers to several arrays (its ``lo_ty()``); a mutable one (a ``Box``) also
writes its new contents back after the call. ``jax.jit`` runs such a program
by binding its jit primitive outside any trace, whose ``to_lojax`` rule turns
the high-level jaxpr into a low-level one (``pe.lower_jaxpr``), lowers the
arguments (``lower_val`` / ``read_loval_in``), spreads each argument's and
result's sharding over its low-level leaves (``_lojax_expand_params``), runs
the low-level program and raises the results (``raise_val``), updating the
boxes. shardc's primitive is a copy of jax's with every rule
(``binding.jit_primitive``), ``to_lojax`` included, so shardc's jit does
exactly that too: the low-level equation then runs through shardc's jit
(lowering, propagation, compilation) like any equation of its primitive.

``lower()`` and ``trace().lower()`` take the same low-level form
(``jax.stages.Traced.lojax``): shardc's jit of the low-level program, whose
``Lowered`` and ``Compiled`` (``HighLowered``, ``HighCompiled``) are called with
the high-level values, converted both ways as ``jax.stages.Compiled`` does.

What shardc adds is the shardings: ``in_shardings`` / ``out_shardings`` as
given to ``jit``, one per argument / result of the high-level program (the
shardings of a high-level value apply to each of its low-level leaves, as jax
applies them), the rest left to propagation or, for arguments, to their data.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import jax
from jax.sharding import NamedSharding, PartitionSpec

from shardc.compiler import signature
from shardc.compiler.function import binding
from shardc.compiler.lowered import AnyMesh, Lowered
from shardc.dialects import jax_private


class HighLevelProgramError(NotImplementedError):
    """A lowering of a program with jax's high-level types (hijax): shardc lowers
    arrays; such a program runs by binding jit's primitive (``JitFunction._bind``)."""


def has_high_values(args: tuple, kwargs: dict) -> bool:
    """Whether any argument leaf, as jax's tracing flattens them, is a value of a
    high-level type."""
    return any(map(jax_private.is_high_value, jax_private.tracing_leaves((args, kwargs))))


def argument_shardings(in_shardings: Any, args: Sequence[Any], kwargs: dict[str, Any],
                       mesh: AnyMesh | None) -> list[NamedSharding | None]:
    """The given sharding of each dynamic argument leaf (None: unspecified); keyword
    arguments take none, as with jax.jit."""
    paths, values = signature.flatten_with_paths((tuple(args), kwargs), "")
    given = signature.broadcast_shardings(in_shardings, tuple(args), "in_shardings")
    given += [None] * (len(values) - len(given))
    return [_resolved(entry, mesh, path, value)
            for path, value, entry in zip(paths, values, given)]


def result_shardings(out_shardings: Any, traced: Any, mesh: AnyMesh | None
                     ) -> list[NamedSharding | None]:
    """The given sharding of each result leaf of the high-level program (None: left to
    propagation)."""
    avals = traced.jaxpr.out_avals
    tree = jax.tree.unflatten(traced.out_tree, list(range(len(avals))))
    given = signature.broadcast_shardings(out_shardings, tree, "out_shardings")
    return [_resolved(entry, mesh, f"result[{i}]", aval)
            for i, (aval, entry) in enumerate(zip(avals, given))]


def _resolved(entry: Any, mesh: AnyMesh | None, path: str, value: Any
              ) -> NamedSharding | None:
    """One given sharding leaf as a ``NamedSharding``: a high-level value's spec is
    checked against each of its low-level leaves when jax lowers them, so here
    only against the mesh."""
    high = getattr(value, "is_high", False) or jax_private.is_high_value(value)
    if high and isinstance(entry, PartitionSpec):
        return signature.to_named_sharding(entry, mesh, path, len(entry))
    ndim = len(getattr(value, "shape", ()))
    return signature.to_named_sharding(entry, mesh, path, ndim)


@dataclasses.dataclass(frozen=True)
class LowLevelProgram:
    """A high-level program's low-level form, ready for shardc's jit of a flat
    function: ``fun`` of the low-level argument leaves, their shardings (None:
    unspecified), the results', the donated positions, and the high-level
    types calls convert with (jax's ``in_types`` / ``out_types``)."""

    fun: Callable
    in_shardings: tuple
    out_shardings: tuple
    donate_argnums: tuple
    in_types: Any
    out_types: Any


def low_level_program(traced: Any, arg_shardings: Sequence[NamedSharding | None],
                      out_shardings: Sequence[NamedSharding | None]) -> LowLevelProgram:
    """``traced``'s low-level form with the given shardings of its high-level arguments
    and results spread over their low-level leaves, as jax.jit spreads them."""
    params, consts = jax_private.jit_call_parts(traced)
    params["in_shardings"] = binding.merged_shardings(
        params["in_shardings"], arg_shardings, len(consts))
    params["out_shardings"] = binding.merged_shardings(params["out_shardings"], out_shardings, 0)
    fun, ins, outs, donated, in_types, out_types = jax_private.low_level_form(traced, params)
    return LowLevelProgram(fun, tuple(binding.given_sharding(s) for s in ins),
                           tuple(binding.given_sharding(s) for s in outs), donated,
                           in_types, out_types)


def low_level_arguments(args: Sequence[Any], kwargs: dict[str, Any]) -> list:
    """The low-level leaves of a call's dynamic arguments."""
    return jax_private.lower_high_values(jax.tree.leaves((tuple(args), kwargs)))


class HighLowered:
    """The ``Lowered`` of a high-level program: shardc's lowering of its low-level form
    (every attribute is that ``Lowered``'s), whose ``compile()`` is called with
    high-level values."""

    def __init__(self, lowered: Lowered, program: LowLevelProgram) -> None:
        self._lowered = lowered
        self._program = program

    def __getattr__(self, name: str) -> Any:
        return getattr(self._lowered, name)

    def compile(self, *args: Any, **kwargs: Any) -> HighCompiled:
        return HighCompiled(self._lowered.compile(*args, **kwargs), self._program)


class HighCompiled:
    """A compiled high-level program: called with high-level values, which are lowered
    to the executable's arguments; its results are raised back and the mutable
    arguments updated, as ``jax.stages.Compiled`` calls one."""

    def __init__(self, compiled: Any, program: LowLevelProgram) -> None:
        self._compiled = compiled
        self._program = program

    def __getattr__(self, name: str) -> Any:
        return getattr(self._compiled, name)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        hi_args = jax.tree.leaves((args, kwargs))
        lo_outs = self._compiled(*jax_private.lower_high_values(hi_args))
        return jax_private.raise_high_results(self._program.in_types, self._program.out_types,
                                              hi_args, list(lo_outs))
