"""``Traced``: a function traced by shardc's ``jit`` for given arguments, not yet lowered.

``jit(f).trace(*args)`` returns one, shaped like ``jax.stages.Traced``: the
jaxpr jax traced (with the arguments' shardings, as jax.jit traces them), the
output types and shardings, and ``lower()``, which lowers those same
arguments with shardc.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax


def _from_jax(name: str, doc: str) -> property:
    """A read-only attribute that jax's own ``Traced`` already answers."""
    return property(lambda self: getattr(self._jax_traced, name), doc=doc)


class Traced:
    """A traced function: ``jaxpr``, ``out_info``, ``args_info``, ``lower()``..."""

    jaxpr = _from_jax("jaxpr", "The closed jaxpr jax traced.")
    fun_name = _from_jax("fun_name", "The traced function's name.")
    in_avals = _from_jax(
        "in_avals", "The arguments' abstract values as traced, as ``(args, kwargs)``.")
    in_tree = _from_jax("in_tree", "The pytree structure of ``(args, kwargs)``.")
    args_info = _from_jax(
        "args_info", "Per argument, its abstract value and whether it is donated.")
    donate_argnums = _from_jax("donate_argnums", "The donated arguments' flat indices.")
    out_avals = _from_jax("out_avals", "The results' abstract values (no given shardings).")
    lojax = _from_jax("lojax", "The low-level form of the trace (jax's ``LoJax``).")

    def __init__(self, jax_traced: Any, lower: Callable[..., Any], out_info: Any) -> None:
        self._jax_traced = jax_traced
        self._lower = lower
        self._out_info = out_info

    @property
    def out_info(self) -> Any:
        """The results as ``jax.ShapeDtypeStruct``s carrying their given shardings."""
        return self._out_info

    @property
    def out_tree(self) -> Any:
        """The pytree structure of the results."""
        return jax.tree.structure(self._out_info)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Evaluate the traced jaxpr on these arguments (op by op), as jax's does."""
        return self._jax_traced(*args, **kwargs)

    def lower(self, *, lowering_platforms: Any = None, propagate: bool | None = None,
              _private_parameters: Any = None) -> Any:
        """Lower with shardc (a ``shardc.compiler.Lowered``), as ``jax.stages.Traced.lower``:
        ``lowering_platforms`` (e.g. ``("tpu",)``) lowers for other platforms than the
        arguments' devices'; ``propagate=`` as in ``jit(...).lower``;
        ``_private_parameters`` are jax's lowering parameters (``jax.export`` passes
        its own), used for jax's lowering of the traced program."""
        return self._lower(lowering_platforms=lowering_platforms, propagate=propagate,
                           lowering_parameters=_private_parameters)
