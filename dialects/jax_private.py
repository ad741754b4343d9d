"""The one module of shardc that touches private jax / jaxlib APIs.

Everything here reaches into ``jaxlib.mlir._mlir_libs`` or ``jax._src``, which
carry no compatibility promise. Keeping every such access in this file means a
jax upgrade breaks exactly one module. Imports of ``jax`` happen inside the
functions so that the CLI, which only needs the MLIR context, never pays for
(or depends on) importing jax.
"""

from __future__ import annotations

from typing import Any

from jaxlib.mlir import ir

SUPPORTED_JAXLIB = "0.10.2"


def upstream_dialect_registry() -> ir.DialectRegistry:
    """Return a registry holding the upstream dialects jaxlib links (func, arith, ...).

    ``jax.extend.lowering.upstream_dialects`` is this same registry, but
    reaching it that way imports jax (0.5 s), which the CLI must not do.
    """
    from jaxlib.mlir._mlir_libs import _jax_mlir_ext

    registry = ir.DialectRegistry()
    _jax_mlir_ext.register_dialects(registry)
    return registry


def legacy_context_mesh() -> Any | None:
    """Return the mesh of an enclosing (deprecated) ``with mesh:`` block, if any.

    ``jax.sharding.get_mesh()`` only sees ``jax.set_mesh``; the older context
    manager is recorded in ``thread_resources``, which has no public accessor.
    """
    from jax._src import mesh as mesh_lib

    mesh = mesh_lib.thread_resources.env.physical_mesh
    return None if mesh.empty else mesh
