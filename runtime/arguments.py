"""Placing call arguments exactly where the executable expects them.

jaxlib's ``execute_sharded`` trusts its inputs completely: a wrongly sharded
buffer of the same size gives silently wrong numbers and a wrong size or
device order crashes the process. So every argument goes through a handler,
chosen by its Python type from a registry (as jax's ``shard_arg``), that
returns a ``jax.Array`` with exactly the expected sharding or raises a shardc
error naming the argument.

Users may register handlers for their own types with
``register_argument_handler``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import jax
import numpy as np

from shardc.dialects import jax_private
from shardc.dialects.errors import (
    ArgumentShardingError,
    DeletedArrayError,
    DeviceMismatchError,
    InvalidArgumentError,
    LayoutMismatchError,
)
from shardc.runtime import layouts


@dataclasses.dataclass
class PlacementCounts:
    """How often arguments needed work before a call (zero on the fast path)."""

    resharded: int = 0  # committed jax.Arrays moved to another sharding
    placed: int = 0  # host data and uncommitted arrays put on the devices
    relaid: int = 0  # uncommitted arrays copied into the compiled layout


@dataclasses.dataclass(frozen=True)
class ExpectedArgument:
    """What the executable expects for one flattened argument."""

    path: str
    aval: jax.ShapeDtypeStruct
    sharding: jax.sharding.Sharding
    device_set: frozenset
    # A jit call's (jax's shard_args): a committed array elsewhere (other devices,
    # another device order, another mesh of the same tiling) was checked when the
    # call was lowered and is moved here. A compiled program's call refuses it.
    moves_committed: bool = False
    # The layout the executable reads it in (None: the backend does not say), whether
    # that is the default one, and the same as PJRT's (``shardc.runtime.layouts``).
    layout: Any = None
    default_layout: bool = True
    placed_layout: Any = None


ArgumentHandler = Callable[[Any, ExpectedArgument, PlacementCounts], jax.Array]

_HANDLERS: dict[type, ArgumentHandler] = {}


def register_argument_handler(kind: type, handler: ArgumentHandler) -> None:
    """Use ``handler(value, expected, counts)`` for arguments of type ``kind``."""
    _HANDLERS[kind] = handler


def place(value: Any, expected: ExpectedArgument, counts: PlacementCounts) -> jax.Array:
    """Return ``value`` as a ``jax.Array`` with exactly ``expected.sharding``."""
    handler = _HANDLERS.get(type(value))
    if handler is None:
        handler = next(
            (h for kind, h in _HANDLERS.items() if isinstance(value, kind)), _unsupported
        )
        _HANDLERS[type(value)] = handler
    return handler(value, expected, counts)


def _deleted(value: jax.Array, expected: ExpectedArgument) -> DeletedArrayError:
    return DeletedArrayError(
        f"Array has been deleted with shape={value.aval.str_short()}. {expected.path}: "
        "it was deleted, or donated to an earlier call (donate_argnums); pass a live array"
    )


def check_arguments(values: Sequence[Any], expected: Sequence[ExpectedArgument],
                    names: Sequence[str] | None = None,
                    unused: Sequence[tuple[Any, Any, str]] = ()) -> None:
    """Every argument against the compiled ones in one pass, all mismatches at once, in
    jax's words (``names``: jax's names of the arguments, e.g. the parameters';
    ``unused``: ``(value, aval, name)`` of each argument the program leaves out,
    whose type is checked as jax checks it).

    Shapes and dtypes first (jax's TypeError), then shardings and layouts: a
    committed array must come with the compiled sharding and lie in the compiled
    layout (jax's ValueError), since placing it elsewhere would be communication
    nobody asked for; host data and uncommitted arrays are placed.
    """
    types, shardings = [], []
    for k, (value, want) in enumerate(zip(values, expected)):
        name = names[k] if names is not None and k < len(names) else want.path
        mismatch = _type_mismatch(value, want.aval, name, want.path)
        if mismatch:
            types.append(mismatch)
        elif mismatch == "" and isinstance(value, jax.Array) and value.committed \
                and not want.moves_committed \
                and value.sharding is not want.sharding \
                and frozenset(value.sharding.device_set) == want.device_set \
                and not value.sharding.is_equivalent_to(want.sharding, value.ndim):
            # (On other devices: placing says which, as a DeviceMismatchError.)
            shardings.append(f"Argument {name} with shape {value.aval.str_short()}:\n"
                             f"  Passed sharding: {value.sharding}\n"
                             f"  Required sharding: {want.sharding} ({want.path})"
                             + _device_orders(value.sharding, want.sharding))
    # The arguments the program leaves out are still of the types it was lowered for.
    types += filter(None, (_type_mismatch(value, aval, name, name)
                           for value, aval, name in unused))
    if types:
        which = f"The first 5 of {len(types)}" if len(types) >= 5 else "The"
        raise InvalidArgumentError(
            "Argument types differ from the types for which this computation was compiled. "
            "Perhaps you are calling the compiled executable with a different enable_x64 "
            f"mode than when it was AOT compiled? {which} mismatches are:\n" + "\n".join(types[:5])
            + "\n(lower the function again for these arguments)")
    laid_out = layouts.layout_mismatches(values, expected, names)
    if shardings or laid_out:
        mismatches = shardings + laid_out
        kind = ("shardings and layouts" if shardings and laid_out
                else "shardings" if shardings else "layouts")
        count = (f"the {len(mismatches)} mismatches" if len(mismatches) < 5
                 else f"5 mismatches out of {len(mismatches)}")
        error = ArgumentShardingError if shardings else LayoutMismatchError
        raise error(
            f"Computation was compiled for input {kind} that disagree with the {kind} "
            f"of arguments passed to it. Here are {count}:\n" + "\n".join(mismatches[:5]))



def _type_mismatch(value: Any, aval: Any, name: str, path: str) -> str | None:
    """The line naming ``value``'s shape or dtype where it is not ``aval``'s; "" where
    it matches; None where the value carries no type to check (typed PRNG keys are
    checked when placed). A Python scalar has the type jax gives it (``2``: int32[]
    with x64 off), so it passes only where that is the compiled one, as with jax."""
    if isinstance(value, jax.ShapeDtypeStruct):
        raise InvalidArgumentError(
            f"Argument '{name}' of shape {_short(value.shape, value.dtype)} of type "
            f"{type(value)} is not a valid JAX type. {path}: a ShapeDtypeStruct "
            "describes an argument but holds no data; call with arrays (or lower() "
            "with it)")
    shape, dtype = getattr(value, "shape", None), getattr(value, "dtype", None)
    if dtype is None and isinstance(value, _PYTHON_SCALARS):
        shape, dtype = (), _python_scalar_dtype(value)
    if shape is None or dtype is None or jax.dtypes.issubdtype(dtype, jax.dtypes.extended):
        return None
    if tuple(shape) != tuple(aval.shape) or _traced_dtype(value, dtype) != aval.dtype:
        return (f"Argument '{name}' compiled with {_short(aval.shape, aval.dtype)} and "
                f"called with {_short(shape, _traced_dtype(value, dtype))} ({path})")
    return ""


_PYTHON_SCALARS = (bool, int, float, complex)


def _python_scalar_dtype(value: bool | int | float | complex) -> np.dtype:
    """The 64-bit dtype jax starts a Python scalar from (canonicalized to 32 bits with
    x64 off, as for host data); ``bool`` first: it is an ``int`` too."""
    for kind in _PYTHON_SCALARS:
        if isinstance(value, kind):
            return np.dtype(kind)
    raise TypeError(type(value))

# ``jax.tree.flatten`` without its Python frames (on every donating call: the donated
# leaves are ``flatten(tree)[0]``).
flatten = jax.tree_util.default_registry.flatten


def release_donated(values: Sequence[Any]) -> None:
    """Delete each of ``values`` (a finished call's donated arguments) whose buffers the
    call consumed.

    XLA invalidates a donated buffer but the ``jax.Array`` still holds it, and jax's
    C++ dispatch, which checks only whether an array was deleted, would run it
    through a fast path: a crash (a segfault on several devices) instead of jax's
    "Array has been deleted" error. Deleted outright, the array sends every later
    call to a check that raises it. An argument that was copied to be placed
    donated the copy: it stays live, and stays.
    """
    for value in values:
        # (Asked of every donated leaf of every donating call: jax's array type first,
        # by identity, no ABC isinstance check.)
        if type(value) is _ARRAY:
            if value.is_deleted():
                value.delete()
            continue
        # Host values have no is_deleted and are never consumed; a tracer (a call under
        # a transformation, which donates nothing) cannot be asked.
        is_deleted = getattr(value, "is_deleted", None)
        if is_deleted is not None and not jax_private.is_tracer(value) and is_deleted():
            value.delete()


_ARRAY = jax_private.array_type()


def _device_orders(passed: jax.sharding.Sharding, required: jax.sharding.Sharding) -> str:
    """The two device orders, where they differ: shardings over the same devices in
    another order print alike, and the order decides which device holds which shard."""
    orders = [[d.id for d in s._device_assignment] for s in (passed, required)]
    if orders[0] == orders[1]:
        return ""
    return (f"\n  the same devices in another order: passed over devices {orders[0]}, "
            f"required over {orders[1]} (jax.device_put it with the required sharding)")


def _short(shape, dtype) -> str:
    return f"{np.dtype(dtype).name}[{','.join(map(str, shape))}]"


def _traced_dtype(value: Any, dtype: Any) -> np.dtype:
    """The dtype jax traces ``value`` with: a ``jax.Array``'s own (64-bit when made
    under ``jax.enable_x64()``, whatever the x64 state now); host data of a 64-bit
    type as its canonical type in the x64 state of the call (32-bit with x64 off)."""
    return dtype if isinstance(value, jax.Array) else jax.dtypes.canonicalize_dtype(dtype)


def _check_type(value: Any, expected: ExpectedArgument) -> None:
    shape, dtype = np.shape(value), getattr(value, "dtype", None)
    if tuple(shape) != tuple(expected.aval.shape) or (
        dtype is not None and _traced_dtype(value, dtype) != expected.aval.dtype
    ):
        raise InvalidArgumentError(
            f"{expected.path}: got {_describe(shape, dtype)} but the function was compiled "
            f"for {_describe(expected.aval.shape, expected.aval.dtype)}; lower it again "
            "for these arguments"
        )


def _describe(shape, dtype) -> str:
    return f"{np.dtype(dtype).name if dtype is not None else '?'}{list(shape)}"


def _jax_array(value: jax.Array, expected: ExpectedArgument, counts: PlacementCounts):
    """``value`` with the expected sharding, in the layout the executable reads."""
    placed = _sharded(value, expected, counts)
    if placed is value and value.committed:
        return value  # its layout was checked with the others' (``check_arguments``)
    return layouts.in_compiled_layout(placed, expected, counts)


def _sharded(value: jax.Array, expected: ExpectedArgument, counts: PlacementCounts):
    if jax.dtypes.issubdtype(value.dtype, jax.dtypes.extended):
        # Extended dtypes run as their physical data (typed PRNG keys as their uint32
        # key data), the physical type in @main.
        return _sharded(jax_private.physical_data(value), expected, counts)
    sharding = value.sharding
    if sharding is expected.sharding or (
        sharding == expected.sharding and value.shape == expected.aval.shape
    ):  # the fast path: already where it must be
        if value.is_deleted():
            raise _deleted(value, expected)
        return value
    if value.is_deleted():
        raise _deleted(value, expected)
    _check_type(value, expected)
    if value.sharding == expected.sharding or value.sharding.is_equivalent_to(
        expected.sharding, len(expected.aval.shape)
    ):
        return value
    if value.committed:
        if frozenset(value.sharding.device_set) != expected.device_set \
                and not expected.moves_committed:
            raise DeviceMismatchError(
                f"{expected.path} is committed to devices "
                f"{sorted(d.id for d in value.sharding.device_set)} but the program runs "
                f"on devices {sorted(d.id for d in expected.device_set)}; "
                "jax.device_put it onto the program's mesh first"
            )
        counts.resharded += 1
    else:
        counts.placed += 1
    return jax_private.place_as_jit(value, expected.sharding)


def _host_value(value: Any, expected: ExpectedArgument, counts: PlacementCounts):
    array = np.asarray(value, dtype=expected.aval.dtype)
    _check_type(array, expected)
    counts.placed += 1
    if array.dtype == jax.dtypes.float0:
        # float0 (the tangent type of integers) holds no data: it runs as booleans, as
        # jax places it.
        array = np.zeros(array.shape, dtype=np.bool_)
    array = jax_private.as_placed_host_value(value, array)
    return jax_private.place_as_jit(array, expected.sharding,
                                    None if expected.default_layout else expected.layout)


def _unsupported(value: Any, expected: ExpectedArgument, counts: PlacementCounts):
    # A type of the user's that jax's dispatch places (registered with jax, maybe
    # after this type was first met here): placed as jax.jit places it.
    if jax_private.has_jax_argument_handler(value):
        counts.placed += 1
        return jax_private.place_as_jit(value, expected.sharding)
    if isinstance(value, jax.ShapeDtypeStruct):
        raise InvalidArgumentError(
            f"{expected.path}: a jax.ShapeDtypeStruct describes an argument but holds no "
            "data; call the compiled function with arrays"
        )
    raise InvalidArgumentError(
        f"{expected.path}: cannot pass a {type(value).__name__} to a compiled function; "
        "expected a jax.Array, a numpy array or a Python scalar"
    )


register_argument_handler(jax.Array, _jax_array)
register_argument_handler(np.ndarray, _host_value)
register_argument_handler(np.generic, _host_value)
for _scalar in (bool, int, float, complex):
    register_argument_handler(_scalar, _host_value)
