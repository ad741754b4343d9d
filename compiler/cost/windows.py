"""Communication of windowed ops whose windowed dimension is sharded (reduce_window).

The op sharding rule marks such a dimension as a permutation factor: each
shard needs ``window - 1`` elements of its neighbours. XLA exchanges that halo
with a collective-permute when it fits in one neighbour's shard and otherwise
all-gathers the dimension (a cumulative sum's window spans the whole
dimension, so its operand is gathered).
"""

from __future__ import annotations

from jaxlib.mlir import ir

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


def _window(op: ir.Operation, rank: int) -> list[int]:
    if "window_dimensions" not in op.attributes:
        return [1] * rank
    return list(ir.DenseI64ArrayAttr(op.attributes["window_dimensions"]))


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
        if window <= 1 or size_product(axes[d]) <= 1:
            continue
        names = tuple(str(a).strip('"') for a in axes[d])
        if window - 1 <= local[d]:
            halo = list(local)
            halo[d] = window - 1
            total = element_bytes
            for size in halo:
                total *= size
            out.append(Collective(COLLECTIVE_PERMUTE, names, total))
        else:
            axes[d] = []
            gathered = True
            out.append(Collective(ALL_GATHER, names,
                                  shard_bytes(operand.shape, element_bytes, axes)))
    return out, (tuple(tuple(a) for a in axes) if gathered else None)
