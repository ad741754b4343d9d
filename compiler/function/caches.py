"""What a shardc jit keeps between calls, bounded and cleared as jax.jit's caches are.

Each jitted function keeps its lowerings, its executables and a map from call
signatures to executables (``FunctionCaches``). jax bounds its own caches
(least recently used entries go first) and frees them on ``jax.clear_caches()``
and ``jit(f).clear_cache()``; shardc's are bounded at the sizes of jax's
(``weakref_lru_cache``'s 2048 entries) and registered with jax's cache
management, so the user's ``jax.clear_caches()`` frees shardc's executables
and lowerings too.

Static arguments enter the keys as jax's C++ dispatch compares them
(``StaticKey``): equal *and of the same type*, so ``f(1)``, ``f(True)`` and
``f(1.0)`` are three programs although ``1 == True == 1.0``; a static argument
that cannot be hashed or compared raises jax's ``ValueError``.
"""

from __future__ import annotations

import collections
import weakref
from collections.abc import Callable, Hashable
from typing import Any, NamedTuple

from shardc.dialects import jax_private

# jax's weakref_lru_cache default, the size of its tracing and lowering caches.
MAX_ENTRIES = 2048


class LRU:
    """A mapping of at most ``maxsize`` entries; the least recently used goes first."""

    def __init__(self, maxsize: int = MAX_ENTRIES) -> None:
        self.maxsize = maxsize
        self._entries: collections.OrderedDict[Hashable, Any] = collections.OrderedDict()

    def get(self, key: Hashable) -> Any:
        value = self._entries.get(key)
        if value is not None:
            try:
                self._entries.move_to_end(key)
            except KeyError:  # another thread evicted it meanwhile: still a hit
                pass
        return value

    def __setitem__(self, key: Hashable, value: Any) -> None:
        self._entries[key] = value
        self._entries.move_to_end(key)
        while len(self._entries) > self.maxsize:
            self._entries.popitem(last=False)

    def __len__(self) -> int:
        return len(self._entries)

    def keys(self) -> list:
        return list(self._entries)

    def clear(self) -> None:
        self._entries.clear()


class FunctionCaches:
    """One jitted function's caches: lowerings by abstract signature, executables by
    (lowering, devices), executables by call signature; counts of lowering hits."""

    def __init__(self) -> None:
        self.lowerings = LRU()
        self.executables = LRU()
        self.by_call = LRU()
        self.hits = 0
        self.misses = 0
        _LIVE.add(self)

    def clear(self) -> None:
        self.lowerings.clear()
        self.executables.clear()
        self.by_call.clear()


class SharedExecutables:
    """Where one lowering's executables are kept in its jit's caches: calls and
    ``compile()`` of every ``Lowered`` of that lowering find one another's, as jax's
    compilation cache (keyed on the module, the devices and the compiler options)
    gives ``f(x)``, ``f.lower(x).compile()`` and ``f.trace(x).lower().compile()`` one
    executable, whichever comes first.

    A ``Lowered``'s module is its own and may be changed in place: one handed to
    the user (``trusted=False``) finds the kept executables only while its module is
    the one it was made with and prints as the lowering did (``lowered_text``).
    The kept executables hold no unsharded reference (``Compiled.reference``: the
    function, through its jax.jit, which would keep these caches alive); a
    ``Lowered`` gets its own copy, with its own."""

    def __init__(self, executables: LRU, key: Hashable, module: Any,
                 lowered_text: Callable[[], str], *, trusted: bool) -> None:
        self._executables = executables
        self._key = key
        self._module = module
        self._lowered_text = lowered_text
        self._trusted = trusted

    def get(self, module: Any, devices: tuple, options: tuple) -> Any:
        """The executable kept for ``module`` on ``devices`` (in order) compiled with
        ``options``, if any (a copy: the caller sets its own attributes)."""
        key = self._slot(module, devices, options)
        found = self._executables.get(key) if key is not None else None
        return _another(found) if found is not None else None

    def put(self, module: Any, devices: tuple, options: tuple, compiled: Any) -> None:
        key = self._slot(module, devices, options)
        if key is not None:
            kept = _another(compiled)
            kept.reference = None
            self._executables[key] = kept

    def _slot(self, module: Any, devices: tuple, options: tuple) -> Hashable | None:
        if module is not self._module:
            return None
        if not self._trusted and str(module) != self._lowered_text():
            return None
        key = (self._key, devices, options)
        try:
            hash(key)
        except TypeError:  # an option's value that cannot be hashed: not kept
            return None
        return key


def _another(compiled: Any) -> Any:
    """Another object of the same executable, whose attributes are its own (a
    ``Compiled`` pickles as its serialized executable: ``copy.copy`` would compile)."""
    other = object.__new__(type(compiled))
    other.__dict__.update(compiled.__dict__)
    return other


class StaticKey:
    """A static argument as a cache key: jax's C++ dispatch's comparison (same type
    and ``==``), whose failure is jax's ``ValueError``."""

    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value

    def __hash__(self) -> int:
        return hash(self.value)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, StaticKey):
            return NotImplemented
        a, b = self.value, other.value
        try:
            return type(a) is type(b) and bool(a == b)
        except Exception as error:  # noqa: BLE001 - any error of the user's __eq__
            raise ValueError(
                "static arguments should be comparable using __eq__.The following error "
                f"was raised when comparing two objects of types {type(a)} and {type(b)}. "
                f"The error was:\n{type(error).__name__}: {error}") from None

    def __repr__(self) -> str:
        return f"StaticKey({self.value!r})"


def static_keys(values: Any) -> tuple[StaticKey, ...]:
    """Static argument values as keys, each checked hashable (jax's error when not;
    an error other than ``TypeError`` from ``__hash__`` is the user's, as it is)."""
    for value in values:
        try:
            hash(value)
        except TypeError as error:
            raise ValueError(
                "Non-hashable static arguments are not supported. An error occurred while "
                f"trying to hash an object of type {type(value)}, {value}. The error was:\n"
                f"TypeError: {error}\n") from None
    return tuple(StaticKey(value) for value in values)


# Every live function's caches, for jax.clear_caches().
_LIVE: weakref.WeakSet[FunctionCaches] = weakref.WeakSet()
# The caches of the jits of each live function, by what each jit was made with.
_BY_FUNCTION: weakref.WeakKeyDictionary[Any, dict[Hashable, FunctionCaches]] = \
    weakref.WeakKeyDictionary()


def function_caches(fun: Any, made_with: Hashable) -> FunctionCaches:
    """The caches of a jit of ``fun`` made with ``made_with`` (jit's arguments).

    As jax.jit's objects share one C++ cache per function and jit arguments, every
    jit of one function made with the same arguments shares its lowerings and
    executables: ``jit(f)(x)`` written again (in a loop, a helper) compiles once,
    also for the calls jax's dispatch hands back to Python each time. A function
    that cannot be weakly referenced or hashed, or arguments that cannot be hashed
    (shardings given in a list), get caches of their own."""
    try:
        of_fun = _BY_FUNCTION.get(fun)
        if of_fun is None:
            of_fun = _BY_FUNCTION[fun] = {}
        found = of_fun.get(made_with)
    except TypeError:
        return FunctionCaches()
    if found is None:
        found = of_fun[made_with] = FunctionCaches()
    return found


class _Info(NamedTuple):
    """As ``functools.lru_cache``'s: lowering hits and misses, entries of both kinds."""

    hits: int
    misses: int
    maxsize: int
    currsize: int


class _EveryFunction:
    """The caches of every shardc jit, as jax's cache management sees one cache
    (``cache_clear``, ``cache_info``, ``cache_keys``, as ``functools.lru_cache``)."""

    def cache_clear(self) -> None:
        for caches in list(_LIVE):
            caches.clear()

    def cache_info(self) -> _Info:
        live = list(_LIVE)
        return _Info(
            sum(c.hits for c in live), sum(c.misses for c in live), MAX_ENTRIES,
            sum(len(c.lowerings) + len(c.executables) for c in live))

    def cache_keys(self) -> list:
        return [key for c in list(_LIVE) for key in c.lowerings.keys()]


# jax holds its registered caches weakly: this module keeps the one it registers.
_EVERY_FUNCTION = _EveryFunction()
jax_private.register_cache(_EVERY_FUNCTION, "shardc.compiler.jit lowerings and executables")
