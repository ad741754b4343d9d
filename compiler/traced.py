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


class Traced:
    """A traced function: ``jaxpr``, ``out_info``, ``lower()``."""

    def __init__(self, jax_traced: Any, lower: Callable[..., Any], out_info: Any) -> None:
        self._jax_traced = jax_traced
        self._lower = lower
        self._out_info = out_info

    @property
    def jaxpr(self) -> Any:
        """The closed jaxpr jax traced."""
        return self._jax_traced.jaxpr

    @property
    def fun_name(self) -> str:
        """The traced function's name."""
        return self._jax_traced.fun_name

    @property
    def out_info(self) -> Any:
        """The results as ``jax.ShapeDtypeStruct``s carrying their given shardings."""
        return self._out_info

    @property
    def in_avals(self) -> Any:
        """The arguments' abstract values as traced, as ``(args, kwargs)``."""
        return self._jax_traced.in_avals

    @property
    def in_tree(self) -> Any:
        """The pytree structure of ``(args, kwargs)``."""
        return self._jax_traced.in_tree

    @property
    def out_tree(self) -> Any:
        """The pytree structure of the results."""
        return jax.tree.structure(self._out_info)

    def lower(self, *, lowering_platforms: Any = None, propagate: bool | None = None) -> Any:
        """Lower with shardc (a ``shardc.compiler.Lowered``), as ``jax.stages.Traced.lower``:
        ``lowering_platforms`` (e.g. ``("tpu",)``) lowers for other platforms than the
        arguments' devices'; ``propagate=`` as in ``jit(...).lower``."""
        return self._lower(lowering_platforms=lowering_platforms, propagate=propagate)
