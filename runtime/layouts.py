"""The device-local layouts of a compiled program's arguments and results.

XLA decides every parameter's and output's layout when it compiles (the one
asked for with ``mhlo.layout_mode``, its choice for ``Layout.AUTO``, else the
default); ``compiled_layouts`` reads them back, as jax's
``_get_layouts_from_executable``, for ``Compiled.input_formats`` /
``output_formats``. The executable reads each argument's buffers as lying in
its compiled layout, so an argument that lies otherwise would give wrong
numbers: a committed one is refused with jax's error
(``layout_mismatches``), any other is copied into the compiled layout
(``in_compiled_layout``), as jax's argument placement does.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax
import numpy as np
from jax.experimental.layout import Format, Layout

from shardc.dialects import jax_private
from shardc.dialects.errors import ShardcError


def compiled_layouts(executable: Any, inputs: Sequence[Any], outputs: Sequence[Any],
                     tokens: int = 0) -> tuple[list, list, list]:
    """The ``Layout`` XLA compiled for each argument and result (after the program's
    ``tokens`` leading tokens), and each argument's as PJRT's (compared cheaply with
    an array's own, ``lies_as_compiled``); None throughout where the backend does
    not say. A concrete layout asked for and not kept is a shardc bug (jax's
    "Unexpected XLA layout override")."""
    read = jax_private.executable_layouts(executable)
    if read is not None:
        read = (read[0][tokens:], read[1][tokens:])
    if read is None or len(read[0]) != len(inputs) or len(read[1]) != len(outputs):
        return [None] * len(inputs), [None] * len(outputs), [None] * len(inputs)
    placed = list(read[0])
    ins, outs = ([jax_private.layout_from_pjrt(x) for x in layouts] for layouts in read)
    for what, infos, layouts in (("input", inputs, ins), ("output", outputs, outs)):
        for info, layout in zip(infos, layouts):
            asked = getattr(info, "layout", None)
            if isinstance(asked, Layout) and not jax_private.user_layout_matches(asked, layout):
                raise ShardcError(
                    f"Unexpected XLA layout override: (XLA) {layout} != {asked} (User {what} "
                    f"layout) for {info.path}; this is a shardc bug")
    return ins, outs, placed


def is_default(layout: Layout | None, sharding: jax.sharding.Sharding, aval: Any) -> bool:
    """Whether ``layout`` is what XLA lays a shard of ``aval`` out as by default."""
    return jax_private.is_default_layout(layout, sharding, aval)


def dispatch_layouts(layouts: Sequence[Layout | None], shardings: Sequence[Any],
                     avals: Sequence[Any]) -> list[Layout | None]:
    """Per argument, the layout jax's C++ dispatch must place it in: None for the
    default one (as jax's ``get_dispatch_layouts``)."""
    return [None if is_default(layout, sharding, aval) else layout
            for layout, sharding, aval in zip(layouts, shardings, avals)]


def lies_as_compiled(value: jax.Array, expected: Any) -> bool:
    """Whether a placed array's buffers lie in the layout ``expected`` (an
    ``ExpectedArgument``) was compiled for, so the executable may read them as they
    are: the same PJRT layout (cheap), else the same dimension order where the
    array's layout names no tiling (jax's comparison: jaxlib 0.10.2's CPU arrays
    do not record the element size of 4-bit types, which the executable's do)."""
    own = jax_private.array_layout(value)
    # None: deleted (reported when placed), a PRNG key array (placed as its key
    # data), or a backend that does not say.
    if own is None or expected.placed_layout is None or own == expected.placed_layout:
        return True
    return jax_private.user_layout_matches(value.format.layout, expected.layout)


def in_compiled_layout(value: jax.Array, expected: Any, counts: Any) -> jax.Array:
    """``value`` itself if it lies in the layout ``expected`` (an ``ExpectedArgument``)
    says, else a copy that does.

    The copy goes through the host: jaxlib 0.10.2 copies a buffer to another layout
    on the same device without moving its elements (the copy reads wrong), while
    host data is laid out as asked. Only uncommitted arrays are copied so
    (committed ones are refused), mostly the results of programs with
    ``Layout.AUTO`` outputs. ``counts`` (a ``PlacementCounts``) counts the copies.
    """
    if lies_as_compiled(value, expected):
        return value
    counts.relaid += 1
    return jax.device_put(np.asarray(value), Format(expected.layout, expected.sharding))


def layout_mismatches(values: Sequence[Any], expected: Sequence[Any],
                      names: Sequence[str] | None = None) -> list[str]:
    """jax's description of each committed array that does not lie in its compiled
    layout (``check_array_xla_sharding_layout_match``); ``expected`` are the
    ``ExpectedArgument``s."""
    mismatches = []
    for k, (value, want) in enumerate(zip(values, expected)):
        if not (isinstance(value, jax.Array) and value.committed) \
                or lies_as_compiled(value, want):
            continue
        name = names[k] if names is not None and k < len(names) else want.path
        mismatches.append(f"Argument {name} with shape {value.aval.str_short()}:\n"
                          f"  Passed layout: {value.format.layout}\n"
                          f"  Required layout: {want.layout} ({want.path})")
    return mismatches
