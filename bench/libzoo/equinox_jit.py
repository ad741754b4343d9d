"""``eqx.filter_jit`` built on a jit of the caller's choice (``jax.jit`` or shardc's).

``eqx.filter_jit(fun)`` makes its one ``jax.jit`` call while it builds the
wrapper (``_filter_jit_cache`` in ``equinox/_jit.py`` jits its flattening
``fun_wrapped`` with ``donate_argnums=0, static_argnums=2``); ``filter_jit``
routes that call (``library_jit.jit_of``), so equinox's filtering of arrays from
static leaves, its donation and its ``Lowered`` / ``Compiled`` (whose
``compile`` passes ``compiler_options=None``) stay its own.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable

import equinox as eqx

from bench.libzoo.library_jit import jit_of

# equinox's module that calls ``jax.jit`` (through its global name ``jax``).
EQUINOX_JIT = importlib.import_module("equinox._jit")


def filter_jit(jit: Callable, fun: Callable, **options) -> Callable:
    """``eqx.filter_jit(fun, **options)`` with ``jit`` in place of ``jax.jit``.

    equinox caches the jitted function per function object (and its options), so
    ``fun`` must be a function no other jit has wrapped (the harness's fresh copy).
    """
    with jit_of(EQUINOX_JIT, jit):
        return eqx.filter_jit(fun, **options)
