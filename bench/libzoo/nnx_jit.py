"""``nnx.jit`` built on a jit of the caller's choice (``jax.jit`` or shardc's).

``nnx.jit(fun, ...)`` makes its ``jax.jit`` call while it builds its
``JitWrapped`` (in ``flax/nnx/transforms/compilation.py``, jitting the
``JitFn`` that splits and merges the graph nodes it is given, with
``out_shardings`` for the nodes' updated state); ``nnx_jit`` routes that call
(``library_jit.jit_of``), so NNX's graph handling, its in-place updates of the
modules passed in, its donation and its ``Lowered`` / ``Compiled`` stay its own.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable

from flax import nnx

from bench.libzoo.library_jit import jit_of

# flax NNX's module that calls ``jax.jit`` (through its global name ``jax``).
NNX_COMPILATION = importlib.import_module("flax.nnx.transforms.compilation")


def nnx_jit(jit: Callable, fun: Callable, **options) -> Callable:
    """``nnx.jit(fun, **options)`` with ``jit`` in place of ``jax.jit``."""
    with jit_of(NNX_COMPILATION, jit):
        return nnx.jit(fun, **options)
