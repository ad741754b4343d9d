"""A library's wrapper of ``jax.jit`` built on a jit of the caller's choice.

Libraries that wrap ``jax.jit`` (equinox's ``filter_jit``, flax NNX's
``nnx.jit``) have no hook for another jit: each makes its ``jax.jit`` call while
it builds the wrapper, looking ``jax.jit`` up through the ``jax`` name of its own
module. ``jit_of(module, jit)`` binds that name, for the time the wrapper is
built, to a view of ``jax`` whose ``jit`` is the given one (the way
``bench/jax_suite_plugin.py`` routes JAX's test files), so everything else is
the library's own: its flattening of arguments, its donation, its ``Lowered`` /
``Compiled`` and its post-processing of the results. jax itself is untouched,
and so is every other use of ``jax.jit`` in the library.
"""

from __future__ import annotations

import contextlib
import threading
import types
from collections.abc import Callable, Iterator

import jax

_LOCK = threading.Lock()


class JaxWithJit(types.ModuleType):
    """``jax`` with ``jit`` replaced: every other attribute is jax's own."""

    def __init__(self, jit: Callable) -> None:
        super().__init__("jax")
        self.jit = jit

    def __getattr__(self, name: str):
        return getattr(jax, name)


@contextlib.contextmanager
def jit_of(module: types.ModuleType, jit: Callable) -> Iterator[None]:
    """Within the block, ``module``'s calls of ``jax.jit`` call ``jit``."""
    with _LOCK:
        module.jax = JaxWithJit(jit)
        try:
            yield
        finally:
            module.jax = jax
