"""Views of ``sdy.manual_computation`` shardings with and without manual axes.

In/out shardings of a manual computation name the manual axes first in every
dimension (verifier-guaranteed), then *free* axes. Propagation only ever sees
free axes: body arguments read their in-sharding with the manual prefix
erased and writes put the prefix back; a data-flow edge on a body argument
views its (inside) sharding from outside by re-adding the prefix, an edge on
a result views its (outside) sharding from inside by erasing it. These are
Shardy's ``eraseManualAxes``, ``eraseFreeAxes`` and
``addFreeAxesToManualComputationSharding``, on pure-Python shardings. Like
Shardy's ``sliceShardingAxes`` the erasers drop dimension priorities.
"""

from __future__ import annotations

import re
from collections.abc import Collection

from jaxlib.mlir import ir

from shardc.compiler.sharding.tensor import DimSharding, TensorSharding

MANUAL_OP = "sdy.manual_computation"
_AXIS_NAME = re.compile(r'"((?:[^"\\]|\\.)*)"')


def manual_axes_of(op: ir.Operation) -> tuple[str, ...]:
    """The names in the op's ``manual_axes`` attribute, in order."""
    if "manual_axes" not in op.attributes:
        return ()
    # ``#sdy<manual_axes{"x", "y"}>``: the bindings expose no accessor.
    return tuple(_AXIS_NAME.findall(str(op.attributes["manual_axes"])))


def _first_free(axes: tuple, manual: Collection[str]) -> int:
    k = 0
    while k < len(axes) and axes[k][0] in manual:
        k += 1
    return k


def _erase(sharding: TensorSharding, manual: Collection[str], keep_manual: bool) -> TensorSharding:
    dims = []
    for dim in sharding.dims:
        k = _first_free(dim.axes, manual)
        dims.append(DimSharding(dim.axes[:k] if keep_manual else dim.axes[k:], dim.closed))
    return TensorSharding(
        sharding.mesh,
        tuple(dims),
        tuple(a for a in sharding.replicated if a[0] not in manual),
        tuple(a for a in sharding.unreduced if a[0] not in manual),
    )


def erase_manual_axes(sharding: TensorSharding | None,
                      manual: Collection[str]) -> TensorSharding | None:
    """The free-axes view (inside the body) of an outer sharding."""
    if sharding is None or not manual:
        return sharding
    return _erase(sharding, manual, keep_manual=False)


def erase_free_axes(sharding: TensorSharding, manual: Collection[str]) -> TensorSharding:
    """Only the manual-axis prefix of every dimension."""
    return _erase(sharding, manual, keep_manual=True)


def add_free_axes(outer: TensorSharding | None, new: TensorSharding | None,
                  manual: Collection[str]) -> TensorSharding | None:
    """``outer``'s manual prefix followed by ``new``'s axes (closedness of ``new``)."""
    if outer is None or new is None:
        return new
    base = erase_free_axes(outer, manual)
    dims = tuple(
        DimSharding(b.axes + n.axes, n.closed, n.priority) for b, n in zip(base.dims, new.dims)
    )
    return TensorSharding(new.mesh, dims, outer.replicated, outer.unreduced)
