"""Wrapping output buffers as global ``jax.Array``s: the result handler registry.

A handler factory is looked up once per executable output by the type of the
output's abstract value (``jax.core.ShapedArray``, tokens, ...) and builds a
jaxlib ``ResultHandler`` for (aval, sharding, committed): committed results
stay where they are when passed on (see ``jax.Array.committed``); the handler
is then applied to
the buffers of every call. Plain dtypes use jaxlib's C++ array handler (the
fastest correct construction measured: ~2 us for 8 buffers); float0, PRNG
key and token outputs go through jax's own registry, which knows how to
rebuild them. Users can register factories for their own abstract types.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax

from shardc.dialects import jax_private

ResultHandlerFactory = Callable[[Any, jax.sharding.Sharding, bool], Any]

_FACTORIES: dict[type, ResultHandlerFactory] = {}


def register_result_handler(aval_type: type, factory: ResultHandlerFactory) -> None:
    """Build output handlers for abstract values of ``aval_type`` with ``factory``,
    called as ``factory(aval, sharding, committed)``."""
    _FACTORIES[aval_type] = factory


def result_handler(aval: Any, sharding: jax.sharding.Sharding, committed: bool = True) -> Any:
    """The handler that turns one output's per-device buffers into a value."""
    factory = _FACTORIES.get(type(aval), _jax_registry)
    return factory(aval, sharding, committed)


def _shaped_array(aval: Any, sharding: jax.sharding.Sharding, committed: bool) -> Any:
    dtype = aval.dtype
    if dtype == jax.dtypes.float0 or jax.dtypes.issubdtype(dtype, jax.dtypes.extended):
        return jax_private.jax_result_handler(aval, sharding, committed)
    return jax_private.fast_array_result_handler(aval, sharding, committed)


def _jax_registry(aval: Any, sharding: jax.sharding.Sharding, committed: bool) -> Any:
    return jax_private.jax_result_handler(aval, sharding, committed)


register_result_handler(jax.core.ShapedArray, _shaped_array)
