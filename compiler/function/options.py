"""``jit``'s own arguments, validated and completed when ``jit`` is called, as jax.jit does.

jax checks a good deal before the function is ever called: shardings that are
not shardings, ``PartitionSpec.UNCONSTRAINED`` in ``in_shardings`` /
``out_shardings``, a mesh axis used twice, ``device`` or ``backend`` together
with shardings, static or donated argument numbers and names that the
function's signature does not have or that overlap; and it infers
``static_argnames`` from ``static_argnums`` (and back, and the same for
donation) through the signature. ``parse`` runs jax's own validation, so the
errors are jax's classes and wording, and returns the completed options shardc
needs. ``SingleDeviceSharding`` leaves (accepted, as by jax.jit) ask for a
one-device program: they become the device the program runs on, and the
leaves themselves unspecified shardings (a result's in another memory than the
device's, a sharding of that device alone in that memory).
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import jax
import numpy as np
from jax.sharding import AbstractMesh, Mesh, SingleDeviceSharding

from shardc.compiler import layouts, memories
from shardc.compiler.checks.strict import StrictOptions
from shardc.compiler.pipelines import ConflictResolution
from shardc.dialects import jax_private
from shardc.dialects.errors import DeviceMismatchError, InvalidArgumentError, InvalidOptionError


@dataclasses.dataclass(frozen=True)
class JitOptions:
    """The completed keyword arguments of one ``jit`` call."""

    static_argnums: tuple[int, ...] = ()
    static_argnames: tuple[str, ...] = ()
    donate_argnums: tuple[int, ...] = ()
    donate_argnames: tuple[str, ...] = ()
    keep_unused: bool = False
    device: Any = None
    backend: str | None = None
    inline: bool = False
    compiler_options: tuple[tuple[str, Any], ...] = ()
    # The shardings with SingleDeviceSharding leaves as None, and their one device.
    in_shardings: Any = None
    out_shardings: Any = None
    single_device: Any = None
    # The SingleDeviceSharding given for every argument (on the device's own memory),
    # else None: jit moves each argument there, committed or not, as ``jit(device=)``.
    inputs_to_device: Any = None
    # Whether in_shardings were given (anything but None / jax's unspecified marker):
    # jax.jit then refuses keyword arguments.
    in_shardings_given: bool = False
    # out_shardings as given, SingleDeviceSharding leaves included: what out_info shows.
    given_out_shardings: Any = None
    # The ``Format`` leaves of in_shardings / out_shardings (None elsewhere), whose
    # shardings are the ones above; None when no leaf is a ``Format``.
    in_formats: Any = None
    out_formats: Any = None
    # The API the user called, as jax's errors name it: "jit", or "pjit" (shardc's pjit).
    api_name: str = "jit"

    def tracing_options(self) -> dict[str, Any]:
        """The options jax.jit takes as they are: they decide how the function is
        traced (which arguments are static or donated, whether it is inlined).
        No donated names is ``None``: jax refuses any other value for a function
        without a signature (``int``), whose names it cannot check."""
        options = {name: getattr(self, name) for name in _TRACING_OPTIONS}
        options["donate_argnames"] = options["donate_argnames"] or None
        return options


_TRACING_OPTIONS = ("static_argnums", "static_argnames", "donate_argnums", "donate_argnames",
                    "inline")


def parse(
    fun: Callable,
    in_shardings: Any,
    out_shardings: Any,
    *,
    static_argnums: int | Sequence[int] | None,
    static_argnames: str | Iterable[str] | None,
    donate_argnums: int | Sequence[int] | None,
    donate_argnames: str | Iterable[str] | None,
    keep_unused: bool,
    device: Any,
    backend: str | None,
    inline: bool,
    compiler_options: dict[str, Any] | None,
) -> JitOptions:
    """Validate ``jit``'s arguments as jax.jit does (jax's errors) and complete them."""
    _check_callable(fun)
    resolved = jax_private.parse_jit_arguments(
        fun, in_shardings=in_shardings, out_shardings=out_shardings,
        static_argnums=static_argnums, static_argnames=static_argnames,
        donate_argnums=donate_argnums, donate_argnames=donate_argnames,
        keep_unused=keep_unused, device=device, backend=backend, inline=inline,
        compiler_options=compiler_options,
    )  # fmt: skip
    # A list of in_shardings is read as the tuple of positional arguments, as by jax.
    if isinstance(in_shardings, list):
        in_shardings = tuple(in_shardings)
    in_shardings_given = in_shardings is not None and not jax_private.is_unspecified(
        in_shardings)
    # Formats carry a layout besides the sharding: the layouts go aside.
    in_shardings, in_formats = layouts.split_formats(in_shardings)
    out_shardings, out_formats = layouts.split_formats(out_shardings)
    # jax's own "unspecified" marker means what None means to shardc.
    unspecified = lambda x: None if jax_private.is_unspecified(x) else x  # noqa: E731
    in_shardings, out_shardings = (
        jax.tree.map(unspecified, shardings, is_leaf=_is_leaf)
        for shardings in (in_shardings, out_shardings))
    given_out_shardings = out_shardings
    inputs_to_device = _all_on_device_memory(in_shardings)
    single_device, in_shardings, out_shardings = _single_device(in_shardings, out_shardings)
    return JitOptions(
        in_shardings=in_shardings,
        out_shardings=out_shardings,
        single_device=single_device,
        inputs_to_device=inputs_to_device,
        in_shardings_given=in_shardings_given,
        given_out_shardings=given_out_shardings,
        in_formats=in_formats,
        out_formats=out_formats,
        static_argnums=tuple(resolved["static_argnums"]),
        static_argnames=tuple(resolved["static_argnames"]),
        donate_argnums=tuple(resolved["donate_argnums"]),
        donate_argnames=tuple(resolved["donate_argnames"]),
        keep_unused=bool(keep_unused),
        device=device,
        backend=backend,
        inline=bool(inline),
        compiler_options=tuple((compiler_options or {}).items()),
    )


def _is_leaf(node: Any) -> bool:
    return node is None or isinstance(node, jax.sharding.Sharding)


def _all_on_device_memory(in_shardings: Any) -> SingleDeviceSharding | None:
    """The ``SingleDeviceSharding`` every leaf of ``in_shardings`` is, on the device's
    own memory (another memory kind keeps the argument's own placement), else None."""
    leaves = jax.tree.leaves(in_shardings, is_leaf=_is_leaf)
    if leaves and all(isinstance(leaf, SingleDeviceSharding)
                      and leaf.memory_kind in (None, "device") for leaf in leaves):
        return leaves[0]
    return None


def _single_device(in_shardings: Any, out_shardings: Any) -> tuple[Any, Any, Any]:
    """The device of the ``SingleDeviceSharding`` leaves (None if none), and the
    shardings with those leaves replaced by None."""
    is_leaf = _is_leaf
    devices = {leaf._device for leaf in jax.tree.leaves((in_shardings, out_shardings),
                                                        is_leaf=is_leaf)
               if isinstance(leaf, SingleDeviceSharding)}
    if not devices:
        return None, in_shardings, out_shardings
    if len(devices) > 1:
        ids = sorted(d.id for d in devices)
        raise DeviceMismatchError(
            f"Received incompatible devices for jitted computation. Got SingleDeviceSharding "
            f"leaves on devices {ids}; a program runs on one device set")
    drop = lambda x: None if isinstance(x, SingleDeviceSharding) else x  # noqa: E731

    def keep_memory(x: Any) -> Any:
        # A result asked into another memory than the device's stays there (``memories``).
        return memories.on_its_device(x) if isinstance(x, SingleDeviceSharding) else x

    return (devices.pop(), jax.tree.map(drop, in_shardings, is_leaf=is_leaf),
            jax.tree.map(keep_memory, out_shardings, is_leaf=is_leaf))


def check_shardc_options(mesh: Any, propagate: Any, strict: Any, propagation: Any,
                         memory_budget: Any) -> None:
    """Check the options shardc adds to jax.jit's, when ``jit`` is called: a wrong one
    would otherwise fail deep in tracing (a mesh) or be taken for true (a string)."""
    if mesh is not None and not isinstance(mesh, (Mesh, AbstractMesh)):
        raise InvalidArgumentError(
            f"jit's mesh must be a jax.sharding.Mesh, an AbstractMesh or None, got "
            f"{type(mesh).__name__} {_short(mesh)}")
    if not isinstance(propagate, (bool, np.bool_)):
        raise InvalidArgumentError(f"jit's propagate must be True or False, got {_short(propagate)}")
    if not isinstance(strict, (bool, np.bool_, StrictOptions)):
        raise InvalidArgumentError(
            f"jit's strict must be True, False or a shardc.compiler.checks.strict.StrictOptions, "
            f"got {_short(strict)}")
    try:
        ConflictResolution.parse(propagation)
    except ValueError:
        known = tuple(m.value for m in ConflictResolution)
        raise InvalidArgumentError(f"propagation must be one of {known}, got {propagation!r}") from None
    if memory_budget is None:
        return
    if isinstance(memory_budget, bool) or not isinstance(memory_budget, (int, np.integer)):
        raise InvalidArgumentError(
            f"jit's memory_budget must be a number of bytes (an int) or None, got "
            f"{_short(memory_budget)}")
    if memory_budget <= 0:
        raise InvalidOptionError(
            f"jit's memory_budget must be a positive number of bytes per device, got "
            f"{memory_budget}")


def propagate_flag(value: Any) -> bool:
    """``lower(propagate=...)``'s value, which a string would pass for true."""
    if not isinstance(value, (bool, np.bool_)):
        raise InvalidArgumentError(f"lower's propagate must be True or False, got {_short(value)}")
    return bool(value)


def _short(value: Any) -> str:
    text = " ".join(repr(value).split())
    return text if len(text) <= 80 else text[:77] + "..."


def _check_callable(fun: Any) -> None:
    """jax.jit's checks of the function, with its wording (jax's C++ dispatch keeps a
    weak reference to the function, which a ``staticmethod`` object does not take)."""
    if isinstance(fun, staticmethod):
        raise InvalidArgumentError(f"staticmethod arguments are not supported, got {fun}")
    if not callable(fun):
        raise InvalidArgumentError(f"Expected a callable value, got {fun}")
    if inspect.isgeneratorfunction(fun):
        raise InvalidArgumentError(f"Expected a function, got a generator function: {fun}")
