"""Ops XLA cannot partition along one dimension, partitioned by moving its tiles.

A concatenate along a sharded dimension, or a sort along one, needs that
dimension whole on every device. Rather than gather it, XLA's partitioner
moves the dimension's tiles onto another dimension
(``hlo_sharding_util::GetFirstTargetDimToMoveShardingTiles``: the first other
dimension whose size the merged tile count divides; ``MoveAndMergeShardingTiles``
appends the moved axes after that dimension's own), reshards every operand
there (an all-to-all), runs the op locally and reshards the result back to its
own sharding (an all-to-all; of a result read later: the others are dead code).
Where no dimension can take the tiles, the
op's rule prices it (the dimension gathered).
"""

from __future__ import annotations

from jaxlib.mlir import ir

from shardc.compiler.cost.op_comm import OpCommunication, dims_text
from shardc.compiler.cost.reshard import reshard_tensor
from shardc.compiler.sharding.axes import size_product
from shardc.compiler.sharding.tensor import DimSharding, Tensor, TensorSharding

# Ops and the attribute naming the dimension they need whole.
_WHOLE_DIMENSION = {"stablehlo.concatenate": "dimension", "stablehlo.sort": "dimension"}


def moves_tiles(name: str) -> bool:
    """Whether ops named ``name`` may be partitioned by moving tiles (``moved_tiles_needs``)."""
    return name in _WHOLE_DIMENSION


def moved_tiles_needs(ir_op: ir.Operation, operands: list[Tensor], results: list[Tensor],
                      mesh) -> tuple[OpCommunication, ...] | None:
    """The collectives of a concatenate / sort whose dimension is sharded in its result,
    partitioned on the sharding with that dimension's tiles moved to another one; None
    where its dimension is not sharded, the results are sharded unlike each other, or
    no dimension can take the tiles."""
    if _rotates(ir_op):
        return None
    dim = ir.IntegerAttr(ir_op.attributes[_WHOLE_DIMENSION[ir_op.name]]).value
    result = results[0]
    if result.sharding is None or any(t.sharding is None for t in operands + results):
        return None
    if any(t.sharding.dims != result.sharding.dims for t in results[1:]):
        return None
    dims = result.sharding.dims
    if dim >= len(dims) or size_product(dims[dim].axes) <= 1:
        return None
    target = _first_target(result.shape, dims, dim)
    if target is None:
        return None
    moved = list(dims)
    moved[target] = DimSharding(dims[target].axes + dims[dim].axes, True)
    moved[dim] = DimSharding((), True)
    temporary = TensorSharding(result.sharding.mesh, tuple(moved), result.sharding.replicated,
                               result.sharding.unreduced)
    axes = tuple(d.axes for d in temporary.dims)
    needs = []
    for index, operand in enumerate(operands):
        reason = (f"sharded {dims_text(operand.sharding)}, the op moves its dimension {dim}'s "
                  f"tiles to dimension {target}: {dims_text(temporary)}")
        needs.extend(OpCommunication(index, reason, collective, axes)
                     for collective in reshard_tensor(operand, temporary, mesh))
    for tensor, value in zip(results, ir_op.results):
        if not any(True for _ in value.uses):
            continue  # an unread result (argsort's sorted keys): its reshard is dead code
        computed = Tensor(tensor.shape, tensor.element_bytes, temporary, tensor.dtype)
        reason = f"computed {dims_text(temporary)}, declared {dims_text(tensor.sharding)}"
        needs.extend(OpCommunication(None, reason, collective)
                     for collective in reshard_tensor(computed, tensor.sharding, mesh))
    return tuple(needs)


def _rotates(ir_op: ir.Operation) -> bool:
    """Whether ``ir_op`` concatenates one value with itself (``jnp.roll`` slices that)
    or slices of one value (a pad with wrap-around): XLA partitions those rotations
    with collective-permutes of their own."""
    if ir_op.name != "stablehlo.concatenate" or len(ir_op.operands) < 2:
        return False
    if len(set(ir_op.operands)) == 1:
        return True
    sources = set()
    for operand in ir_op.operands:
        owner = operand.owner  # an op (its view) or, for an argument, a block
        owner = getattr(owner, "operation", owner)
        if not isinstance(owner, ir.Operation) or owner.name != "stablehlo.slice":
            return False
        sources.add(owner.operands[0])
    return len(sources) == 1


def _first_target(shape: tuple[int, ...], dims: tuple[DimSharding, ...], source: int
                  ) -> int | None:
    """``GetFirstTargetDimToMoveShardingTiles``: the first dimension but ``source`` whose
    size the product of its and ``source``'s tile counts divides."""
    if len(shape) < 2 or shape[source] == 1:
        return None
    tiles = size_product(dims[source].axes)
    for dim, size in enumerate(shape):
        if dim != source and size % (tiles * size_product(dims[dim].axes)) == 0:
            return dim
    return None
