"""Communication of windowed ops whose windowed dimension is sharded (reduce_window).

The op sharding rule marks such a dimension as a permutation factor: each
shard reads the elements its windows reach in its neighbours' shards. XLA
exchanges those halos with collective-permutes (``halos.windowed_halos``: the
window's size, stride, padding and dilations decide them; a pooling window
whose stride tiles the shards needs none) and, where a halo reaches past the
neighbours with the dimension read almost whole, all-gathers the dimension (a
cumulative sum's window spans the whole dimension, so its operand is gathered).
"""

from __future__ import annotations

from jaxlib.mlir import ir

from shardc.compiler.cost.halos import WindowDim, windowed_halos
from shardc.compiler.cost.reshard import (
    ALL_GATHER,
    COLLECTIVE_PERMUTE,
    Collective,
    collective_element_bytes,
    dim_axes,
    shard_bytes,
    shard_shape,
)
from shardc.compiler.sharding.axes import size_product
from shardc.compiler.sharding.tensor import Tensor


def _attr(op: ir.Operation, name: str, rank: int, default: int) -> list[int]:
    if name not in op.attributes:
        return [default] * rank
    return list(ir.DenseI64ArrayAttr(op.attributes[name]))


def _window(op: ir.Operation, rank: int) -> list[WindowDim]:
    """The reduce_window's window, one ``WindowDim`` per dimension."""
    sizes = _attr(op, "window_dimensions", rank, 1)
    strides = _attr(op, "window_strides", rank, 1)
    base = _attr(op, "base_dilations", rank, 1)
    dilations = _attr(op, "window_dilations", rank, 1)
    padding = ([int(v) for v in ir.DenseIntElementsAttr(op.attributes["padding"])]
               if "padding" in op.attributes else [0] * (2 * rank))
    return [WindowDim(sizes[d], strides[d], padding[2 * d], padding[2 * d + 1], base[d],
                      dilations[d]) for d in range(rank)]


def window_collectives(op: ir.Operation, operand: Tensor) -> list[Collective]:
    """The halo exchange or gather a reduce_window needs on its sharded windowed dims."""
    return _window_plan(op, operand)[0]


def window_gather_target(op: ir.Operation, operand: Tensor) -> tuple | None:
    """The per-dimension axes a reduce_window's operand is gathered to (its windowed
    dimensions that a halo cannot serve unsharded), or None where nothing is gathered:
    a later op gathering the value the same way reuses the gathered one."""
    return _window_plan(op, operand)[1]


def _window_plan(op: ir.Operation, operand: Tensor) -> tuple[list[Collective], tuple | None]:
    rank = len(operand.shape)
    axes = [list(a) for a in dim_axes(operand.sharding, rank)]
    local = shard_shape(operand.shape, axes)
    element_bytes = collective_element_bytes(operand.element_bytes, operand.dtype)
    out: list[Collective] = []
    gathered = False
    for d, window in enumerate(_window(op, rank)):
        count = size_product(axes[d])
        if window == WindowDim() or count <= 1:
            continue
        names = tuple(str(a).strip('"') for a in axes[d])
        found = windowed_halos(operand.shape[d], count, window)
        if isinstance(found, tuple):
            rest = element_bytes
            for other, size in enumerate(local):
                rest *= size if other != d else 1
            out.extend(Collective(COLLECTIVE_PERMUTE, names, halo * rest) for halo in found[0])
            local[d] = found[1]
        else:
            axes[d] = []
            gathered = True
            out.append(Collective(ALL_GATHER, names,
                                  shard_bytes(operand.shape, element_bytes, axes)))
    return out, (tuple(tuple(a) for a in axes) if gathered else None)
