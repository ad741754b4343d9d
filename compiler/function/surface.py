"""The parts of ``jax.jit``'s object that are not lowering or calling, for shardc's.

jax's jitted function (jaxlib's ``PjitFunction``) prints as
``<PjitFunction of f>``, pickles as the function and the options it was made
with (never its executables), binds as a method when it is a class attribute,
counts and clears what its dispatch cached (``_cache_size``, ``_clear_cache``,
``clear_cache``). ``JitSurface`` gives ``shardc.compiler.api.JitFunction`` the
same, over what that class keeps: ``fun`` and the options it was made with,
the C++ dispatch (``_dispatch``), jax's jit of the function it traces with
(``_jax_jit``) and its own caches (``_caches``, ``shardc.compiler.function.caches``).
"""

from __future__ import annotations

import functools
import types
from typing import Any

# What a pickled shardc jit holds, besides what jax's holds (the function, its
# name, the static argument numbers and names): the arguments it was made with.
_MADE_WITH = ("options", "mesh", "propagate", "strict", "propagation")
_STATE_VERSION = 1


class JitSurface:
    """``repr``, pickling, method binding and cache control as jax.jit's object has them."""

    def _take_attributes_of(self, fun: Any) -> None:
        """The function's attributes, name, docstring, module and annotations, as
        jax's ``wraps`` gives them to its jitted function (``__name__`` through
        ``functools.partial``s)."""
        try:
            name = function_name(fun)
            self.__dict__.update(getattr(fun, "__dict__", {}))
            self.__annotations__ = getattr(fun, "__annotations__", {})
            self.__name__ = name
            self.__module__ = getattr(fun, "__module__", "<unknown module>")
            self.__doc__ = getattr(fun, "__doc__", "") or ""
            self.__qualname__ = getattr(fun, "__qualname__", name)
            self.__wrapped__ = fun
        except Exception:  # noqa: BLE001 - as jax's: a function whose attributes fail
            pass

    def __repr__(self) -> str:
        # jax's: the wrapped function's repr, or none where that fails (or is gone).
        try:
            return f"<PjitFunction of {self.__wrapped__!r}>"
        except Exception:  # noqa: BLE001 - a repr must not raise
            return "<PjitFunction>"

    def __get__(self, instance: Any, owner: type | None = None) -> Any:
        """A jitted function defined in a class body is a method of its instances."""
        if instance is None:
            return self
        return types.MethodType(self, instance)

    def __getstate__(self) -> dict[str, Any]:
        """The function and what it was jitted with; caches and executables stay behind
        (they name devices and live modules), as jax's pickles leave its own."""
        return {
            "version": _STATE_VERSION,
            "function_name": function_name(self.fun),
            "fun": self.fun,
            "static_argnums": list(self.static_argnums),
            "static_argnames": list(self.static_argnames),
            **{name: getattr(self, name) for name in _MADE_WITH},
        }

    def __setstate__(self, state: dict[str, Any]) -> None:
        if state.get("version") != _STATE_VERSION:
            raise ValueError(f"Invalid shardc jit state version {state.get('version')!r}, "
                             f"expected {_STATE_VERSION}")
        type(self).__init__(self, state["fun"], **{name: state[name] for name in _MADE_WITH})

    def _cache_size(self) -> int:
        """The number of call signatures the C++ dispatch holds for this function."""
        return self._dispatch._cache_size()

    def _clear_cache(self) -> None:
        """Forget this function's executables (the dispatch's entries and shardc's)."""
        self._dispatch._clear_cache()
        self._caches.clear()

    def clear_cache(self) -> None:
        """Forget everything cached for this function: executables, lowerings, traces."""
        self._clear_cache()
        self._jax_jit.clear_cache()


def function_name(fun: Any) -> str:
    """jax's name for a function: its ``__name__``, through ``functools.partial``s."""
    name = getattr(fun, "__name__", None)
    if name is not None:
        return name
    if isinstance(fun, functools.partial):
        return function_name(fun.func)
    return "<unnamed function>"


def error_name(fun: Any, called: bool) -> str:
    """The name jax's device errors give a jitted function: when it is called, its
    ``__qualname__`` (``Test.test_f.<locals>.f``; else its ``__name__``, else what it
    prints as); from ``lower()``, the name its jit equation carries."""
    if called:
        return getattr(fun, "__qualname__", getattr(fun, "__name__", str(fun)))
    return function_name(fun)
