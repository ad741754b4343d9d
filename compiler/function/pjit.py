"""``shardc.compiler.pjit``: jax's ``pjit`` on shardc, for code written against it.

jax deprecated ``jax.experimental.pjit.pjit`` in favour of ``jax.jit`` but keeps
its behaviour, which differs from jit's in one place: the mesh of a legacy
``with mesh:`` block. Under one, pjit takes that mesh as the context mesh (as
``jax.set_mesh`` is for jit): bare ``PartitionSpec``s resolve against it and the
program runs on its devices; and it reads a ``None`` in ``in_shardings`` /
``out_shardings`` as *replicated over that mesh* (jit reads it as unspecified,
as pjit does outside such a block). ``pjit`` builds a shardc jit of the
function for each reading of ``None`` (one per legacy mesh, which it gets as
``jit(mesh=...)``, shardc's context mesh) and picks per call (or ``lower`` /
``trace``) by which block, if any, is active.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import Any

import jax
from jax.sharding import PartitionSpec

from shardc.compiler import signature
from shardc.compiler.api import JitFunction, jit
from shardc.dialects import jax_private


class _NotGiven:
    """Shardings not given to ``pjit``: unspecified even under a legacy mesh (unlike
    None)."""


_NOT_GIVEN = _NotGiven()


class PjitFunction:
    """What ``pjit`` returns: called, lowered and traced like a shardc jit."""

    def __init__(self, fun: Callable, shardings: tuple[Any, Any], replicated: tuple[Any, Any],
                 options: dict[str, Any]) -> None:
        self._fun = fun
        self._replicated = replicated
        self._options = options
        self._unspecified = _as_pjit(jit(fun, *shardings, **options))
        self._in_mesh: dict[Any, JitFunction] = {}  # per legacy mesh
        functools.update_wrapper(self, fun, updated=())

    def _current(self) -> JitFunction:
        mesh = jax_private.legacy_context_mesh()
        if mesh is None:
            return self._unspecified
        jitted = self._in_mesh.get(mesh)
        if jitted is None:
            # jit(mesh=) is shardc's context mesh, under enclosing traces too.
            options = {"mesh": mesh, **self._options}
            jitted = self._in_mesh[mesh] = _as_pjit(
                jit(self._fun, *self._replicated, **options))
            # A None read as replicated is still no in_shardings to jax: keyword
            # arguments stay allowed.
            if isinstance(jitted, JitFunction):  # not AUTO's, which jits once it chose
                jitted.options = dataclasses.replace(
                    jitted.options,
                    in_shardings_given=self._unspecified.options.in_shardings_given)
        return jitted

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._current()(*args, **kwargs)

    def lower(self, *args: Any, **kwargs: Any) -> Any:
        """``JitFunction.lower`` under the legacy mesh, if any."""
        return self._current().lower(*args, **kwargs)

    def trace(self, *args: Any, **kwargs: Any) -> Any:
        """``JitFunction.trace`` under the legacy mesh, if any."""
        return self._current().trace(*args, **kwargs)

    def eval_shape(self, *args: Any, **kwargs: Any) -> Any:
        """``JitFunction.eval_shape`` under the legacy mesh, if any."""
        return self._current().eval_shape(*args, **kwargs)


def _as_pjit(jitted: JitFunction) -> JitFunction:
    """``jitted``, whose errors name ``pjit`` as jax's pjit's do."""
    if isinstance(jitted, JitFunction):
        jitted.options = dataclasses.replace(jitted.options, api_name="pjit")
    return jitted


def pjit(fun: Callable, in_shardings: Any = _NOT_GIVEN, out_shardings: Any = _NOT_GIVEN,
         **options: Any) -> PjitFunction:
    """jax's ``pjit`` with shardc's jit underneath: the keywords are ``jit``'s.

    Under a legacy ``with mesh:`` block, a ``None`` sharding given here means
    replicated over that mesh, and the mesh is the context mesh; elsewhere
    ``pjit`` is ``jit``.
    """
    replicate = lambda x: PartitionSpec() if x is None else x  # noqa: E731

    def readings(shardings: Any) -> tuple[Any, Any]:
        if shardings is _NOT_GIVEN:
            return None, None
        return shardings, jax.tree.map(replicate, shardings, is_leaf=signature.is_sharding_leaf)

    (ins, ins_replicated), (outs, outs_replicated) = readings(in_shardings), readings(out_shardings)
    return PjitFunction(fun, (ins, outs), (ins_replicated, outs_replicated), options)
