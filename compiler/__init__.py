"""The shardc compiler: lowering JAX functions with Shardy shardings, and passes.

``jit`` and the error types are resolved lazily (PEP 562) so that importing
``shardc.compiler`` for its passes, as the ``shardc-opt`` CLI does, never
imports jax.
"""

from __future__ import annotations

from typing import Any

_LAZY = {
    "jit": "shardc.compiler.api",
    "pjit": "shardc.compiler.function.pjit",
    "Lowered": "shardc.compiler.lowered",
    "JitFunction": "shardc.compiler.api",
    "AUTO": "shardc.compiler.auto",
    "register_sharding_rule": "shardc.compiler.sharding.user_rules",
    "StrictModeError": "shardc.compiler.checks.strict",
}
_ERRORS = "shardc.dialects.errors"


def __getattr__(name: str) -> Any:
    import importlib

    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    errors = importlib.import_module(_ERRORS)
    if name.endswith("Error") and hasattr(errors, name):
        return getattr(errors, name)
    raise AttributeError(f"module 'shardc.compiler' has no attribute {name!r}")
