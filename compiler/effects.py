"""A lowering's side effects, as jax's lowering of the same jit decided them.

jax's module for a function with ordered effects (``debug.print(...,
ordered=True)``, ``io_callback(..., ordered=True)``) has one token argument
and result per effect in front; one reading or writing mutable arrays
(``jax.new_ref``) takes the ``Ref``s it closes over after the arguments and
returns each ``Ref``'s new value as an extra result. shardc annotates and
compiles ``@main`` as it is: this module reads those decisions
(``ProgramEffects``, which ``shardc.runtime.effects`` runs), gives the extra
values their signatures (a ``Ref``'s new value is laid out as the ``Ref``) and
applies jax's rule that only ``io_callback``'s ordered effects may run on more
than one device.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax
from jax.sharding import Mesh, NamedSharding

from shardc.compiler import signature
from shardc.compiler.signature import LeafSignature
from shardc.dialects import jax_private
from shardc.dialects.errors import UnshardableEffectError
from shardc.runtime.effects import ProgramEffects


def program_effects(jax_lowered: Any) -> ProgramEffects:
    """The effects of jax's lowering (a ``jax.stages.Lowered``) of the function."""
    ordered, unordered, closed_refs, writes = jax_private.lowering_effects(jax_lowered)
    return ProgramEffects(tuple(ordered), unordered, tuple(closed_refs),
                          None if writes is None else tuple(writes))


def closed_ref_leaves(effects: ProgramEffects) -> list[LeafSignature]:
    """The signatures of the ``Ref``s the function closes over, laid out as they are
    (as jax.jit passes them)."""
    leaves = []
    for i, ref in enumerate(effects.closed_refs):
        sharding = jax_private.ref_buffer(ref).sharding
        sharding = sharding if isinstance(sharding, NamedSharding) else None
        aval = jax.ShapeDtypeStruct(ref.shape, ref.dtype, is_ref=True)
        leaves.append(LeafSignature(f"closed-over Ref {i}", aval, sharding, sharding))
    return leaves


def program_values(effects: ProgramEffects, args: Sequence[LeafSignature],
                   results: Sequence[LeafSignature], closed: Sequence[LeafSignature]
                   ) -> tuple[list[LeafSignature], list[LeafSignature]]:
    """``@main``'s arguments and results after its tokens: the call's arguments and the
    closed-over ``Ref``s; the function's results with the new value of each ``Ref``
    where jax put it, sharded as that ``Ref``."""
    values = [*args, *closed]
    if effects.writes is None:
        return values, list(results)
    own = iter(results)
    outputs = []
    for source in effects.writes:
        if source is None:
            outputs.append(next(own))
        else:
            ref = values[source]
            outputs.append(LeafSignature(f"new value of {ref.path}", ref.aval, ref.sharding,
                                         ref.type_sharding))
    return values, outputs


def lowering_shardings(closed_jaxpr: Any, arg_leaves: Sequence[LeafSignature],
                       results: Sequence[LeafSignature]) -> tuple[list | None, list | None]:
    """The argument and result shardings jax lowers a function with (per leaf, None:
    unspecified; None: none at all), as if given to ``jax.jit``.

    shardc writes the module's shardings itself, but jax's lowering reads them where
    it needs the program's devices: host callbacks that name their device
    (``pure_callback(..., sharding=)``) are found in the program's device order, and
    ``custom_partitioning`` ops are lowered as calls to their partitioner only on
    more than one device (inlined otherwise). Such a program is lowered with the
    leaves' concrete shardings, as jax.jit lowers with its ``in_shardings`` and
    ``out_shardings`` (unplaced arguments alone would give jax one default device).
    Any program also gets its PRNG key results' given shardings
    (``signature.key_result_shardings``).
    """
    keys = signature.key_result_shardings(results)
    if not (jax_private.callback_shardings_in(closed_jaxpr)
            or "custom_partitioning" in jax_private.primitive_names(closed_jaxpr)):
        return None, keys
    outs = _concrete_shardings(results)
    if keys is not None:
        outs = [key if key is not None else out
                for key, out in zip(keys, outs or [None] * len(keys))]
    return _concrete_shardings(arg_leaves), outs


def _concrete_shardings(leaves: Sequence[LeafSignature]) -> list | None:
    shardings = [leaf.sharding if leaf.sharding is not None
                 and isinstance(leaf.sharding.mesh, Mesh) else None for leaf in leaves]
    return shardings if any(s is not None for s in shardings) else None


def check_ref_arguments(fun: Any, args: tuple, kwargs: dict, *, static_argnums: tuple,
                        static_argnames: tuple, effects: ProgramEffects) -> None:
    """jax.jit's rules for a call's ``Ref``s, checked at every call as jax does: each
    is passed once, and none is both closed over and passed (jax's ``ValueError``s,
    naming the arguments)."""
    dynamic_args = [a for i, a in enumerate(args) if i not in static_argnums]
    dynamic_kwargs = {k: v for k, v in kwargs.items() if k not in static_argnames}
    values = jax.tree.leaves((tuple(dynamic_args), dynamic_kwargs))
    if not effects.closed_refs and not any(jax_private.is_ref(v) for v in values):
        return
    jax_private.check_ref_arguments(fun, args, kwargs, static_argnums, static_argnames,
                                    values, list(effects.closed_refs))


def check_device_count(effects: ProgramEffects, device_count: int | None) -> None:
    """jax's rule: a program of more than one device may only have ordered effects
    that say how they are sharded (``io_callback``'s); others raise jax's error."""
    if device_count is None or device_count <= 1:
        return
    unsupported = jax_private.effects_unshardable(list(effects.ordered))
    if unsupported:
        raise UnshardableEffectError(
            "The following ordered effects are not supported for more than 1 device: "
            f"{unsupported} (the program's shardings span {device_count} devices)")
