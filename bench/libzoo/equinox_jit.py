"""``eqx.filter_jit`` built on a jit of the caller's choice (``jax.jit`` or shardc's).

equinox has no hook for another jit: ``eqx.filter_jit(fun)`` makes its one
``jax.jit`` call while it builds the wrapper (``_filter_jit_cache`` in
``equinox/_jit.py`` jits its flattening ``fun_wrapped`` with
``donate_argnums=0, static_argnums=2``), looking ``jax.jit`` up through the
``jax`` name of its own module. ``filter_jit`` binds that name, for the time
``eqx.filter_jit`` builds the wrapper, to a view of ``jax`` whose ``jit`` is the
given one — the way ``bench/jax_suite_plugin.py`` routes JAX's test files —
so everything else is equinox's own: its filtering of arrays from static
leaves, its donation, its ``Lowered`` / ``Compiled`` (whose ``compile`` passes
``compiler_options=None``) and its post-processing of the results. jax itself
is untouched, and so is every other use of ``jax.jit`` in equinox.
"""

from __future__ import annotations

import contextlib
import importlib
import threading
import types
from collections.abc import Callable, Iterator

import equinox as eqx
import jax

# equinox's module that calls ``jax.jit`` (through its global name ``jax``).
EQUINOX_JIT = importlib.import_module("equinox._jit")
_LOCK = threading.Lock()


class JaxWithJit(types.ModuleType):
    """``jax`` with ``jit`` replaced: every other attribute is jax's own."""

    def __init__(self, jit: Callable) -> None:
        super().__init__("jax")
        self.jit = jit

    def __getattr__(self, name: str):
        return getattr(jax, name)


@contextlib.contextmanager
def jit_of_equinox(jit: Callable) -> Iterator[None]:
    """Within the block, equinox's ``filter_jit`` calls ``jit`` where it calls ``jax.jit``."""
    with _LOCK:
        EQUINOX_JIT.jax = JaxWithJit(jit)
        try:
            yield
        finally:
            EQUINOX_JIT.jax = jax


def filter_jit(jit: Callable, fun: Callable, **options) -> Callable:
    """``eqx.filter_jit(fun, **options)`` with ``jit`` in place of ``jax.jit``.

    equinox caches the jitted function per function object (and its options), so
    ``fun`` must be a function no other jit has wrapped (the harness's fresh copy).
    """
    with jit_of_equinox(jit):
        return eqx.filter_jit(fun, **options)
