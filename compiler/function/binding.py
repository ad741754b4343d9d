"""How a shardc-jitted function becomes an equation of an enclosing jax trace.

Called with tracers (under ``grad``, ``vmap``, ``jit``, ``eval_shape``,
``checkpoint``, a loop body, ``shard_map``, another shardc ``jit``), a
shardc-jitted function must behave as ``jax.jit`` does: bind one equation
into the enclosing trace, which the transformation then rewrites, and whose
shardings reach the enclosing lowering. shardc's equations use its own
primitive: a copy of jax's jit primitive, named ``jit`` as jax's is (a jaxpr
prints as under ``jax.jit``), with every rule jax has for it
(``jax_private.clone_jit_primitive``), so transformations produce exactly what
they produce for ``jax.jit``, except that *executing* an equation
(eagerly, e.g. the forward and backward passes of ``jax.grad`` called outside
any jit) lowers, propagates and compiles it with shardc. Staged into an
enclosing shardc ``jit``, the equation lowers like jax's nested jit (a call
whose arguments and results carry sharding constraints), which shardc's
pipeline inlines and propagates.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Sequence
from typing import Any

import jax
from jax.sharding import NamedSharding

from shardc.dialects import jax_private

# Builds a shardc jit of a flat function: (fun, in_shardings, out_shardings,
# donate_argnums, compiler_options, keep_unused) -> a jit whose ``run`` executes it.
# Given by ``shardc.compiler.api``, which this module must not import (the api
# imports it).
MakeJit = Callable[[Callable, tuple, tuple, tuple, tuple, bool], Callable]


def jit_primitive(make_jit: MakeJit) -> Any:
    """shardc's jit primitive; executing an equation runs ``make_jit``'s jit."""
    # Per jaxpr (weakly: transformations make many), the jits built for it.
    jitted: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()

    def execute(*args: Any, jaxpr: Any, in_shardings: Sequence, out_shardings: Sequence,
                donated_invars: Sequence[bool], compiler_options_kvs: tuple = (),
                keep_unused: bool = False, **_: Any) -> list:
        ins = tuple(given_sharding(s) for s in in_shardings)
        outs = tuple(given_sharding(s) for s in out_shardings)
        donated = tuple(i for i, d in enumerate(donated_invars) if d)
        per_jaxpr = jitted.setdefault(jaxpr, {})
        key = (ins, outs, donated, compiler_options_kvs, keep_unused)
        if key not in per_jaxpr:
            per_jaxpr[key] = make_jit(jax_private.jaxpr_function(jaxpr), ins, outs, donated,
                                      compiler_options_kvs, keep_unused)
        return list(per_jaxpr[key].run(*args))

    return jax_private.clone_jit_primitive("jit", execute)


def given_sharding(sharding: Any) -> NamedSharding | None:
    """A jit parameter's sharding as shardc's jit takes it (None: unspecified)."""
    if jax_private.is_unspecified(sharding) or not isinstance(sharding, NamedSharding):
        return None
    return sharding


def under_a_trace() -> bool:
    """Whether a call now must bind into an enclosing trace (any transformation or
    staging is active: only then can arguments be tracers)."""
    return not jax_private.trace_state_clean()


def bind(primitive: Any, traced: Any, leaves: Sequence[Any],
         in_shardings: Sequence[NamedSharding | None],
         out_shardings: Sequence[NamedSharding | None], keep_unused: bool,
         compiler_options: tuple = ()) -> Any:
    """Bind one equation for a ``jax.stages.Traced`` with shardc's resolved shardings.

    ``leaves`` are the dynamic argument leaves in the traced order;
    ``in_shardings`` / ``out_shardings`` hold one ``NamedSharding`` (given) or
    ``None`` (left to propagation) per argument / result leaf; ``keep_unused``
    is the user's (shardc traces with every argument kept), and so are
    ``compiler_options`` (``(name, value)`` pairs): jax's staging rule refuses
    them on a jit nested in another, with jax's error, and executing the
    equation compiles with them.
    """
    jax_private.copy_late_jit_rules()
    if jax_private.has_kernel_refs(leaves):
        # Called inside a Pallas kernel: Pallas lowers (or interprets) the equation,
        # which no one executes, and its interpreter walks into jax's own jit
        # equations by the primitive's identity: jax's, as jax.jit binds it.
        primitive = jax_private.jax_jit_primitive()
    params, consts = jax_private.jit_call_parts(traced)
    params["in_shardings"] = merged_shardings(params["in_shardings"], in_shardings, len(consts))
    params["out_shardings"] = merged_shardings(params["out_shardings"], out_shardings, 0)
    params["keep_unused"] = keep_unused
    params["compiler_options_kvs"] = tuple(compiler_options)
    out = primitive.bind(*consts, *leaves, **params)
    return jax.tree.unflatten(traced.out_tree, out)


def bind_high(primitive: Any, traced: Any, leaves: Sequence[Any],
              in_shardings: Sequence[NamedSharding | None],
              out_shardings: Sequence[NamedSharding | None]) -> Any:
    """Bind one equation for a ``jax.stages.Traced`` whose program has jax's high-level
    types, with jax's parameters and the given shardings, one per high-level argument
    / result leaf (jit's lowering rule for such programs, ``to_lojax``, turns the
    types into arrays, spreads each sharding over a value's arrays and binds again)."""
    jax_private.copy_late_jit_rules()
    params, consts = jax_private.jit_call_parts(traced)
    params["in_shardings"] = merged_shardings(params["in_shardings"], in_shardings, len(consts))
    params["out_shardings"] = merged_shardings(params["out_shardings"], out_shardings, 0)
    out = primitive.bind(*consts, *leaves, **params)
    return jax.tree.unflatten(traced.out_tree, out)


def merged_shardings(entries: Sequence, given: Sequence[NamedSharding | None], offset: int) -> tuple:
    """jax's per-value entries with shardc's given shardings in place of the unspecified."""
    merged = list(entries)
    for i, sharding in enumerate(given):
        if sharding is not None:
            merged[offset + i] = sharding
    return tuple(merged)
