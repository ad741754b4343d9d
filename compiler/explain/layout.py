"""The copies XLA's CPU backend makes to put operands in the layout its kernels want.

``relayout`` says which operands of a dot or convolution XLA:CPU copies
transposed (and whether the result comes out in another order);
``transposed_gather`` whether an all-gather goes through a transposed copy.
The liveness walk (``liveness``) adds these copies as buffers.
"""

from __future__ import annotations

from jaxlib.mlir import ir
from jaxlib.mlir.dialects import stablehlo

from shardc.compiler.cost.reshard import (
    ALL_GATHER,
    ALL_TO_ALL,
    dim_axes,
    shard_bytes,
    shard_shape,
)


def relayout(op: ir.Operation, name: str, operands, results) -> dict[int, int]:
    """Operand index -> shard bytes of the transposed copy XLA's CPU kernel makes of it.

    A batched dot wants each operand's batch dimensions leading (major); a
    convolution wants ``b01f_01io->b01f``. Other operand orders are copied
    transposed; key -1 (value 1) marks a result produced in another order.
    """
    order: list[tuple[int, list[int]]] = []  # (operand index or -1, wanted position per dim)
    try:
        if name == "stablehlo.dot_general":
            dims = stablehlo.DotDimensionNumbers(op.attributes["dot_dimension_numbers"])
            for index, batch in enumerate((list(dims.lhs_batching_dimensions),
                                           list(dims.rhs_batching_dimensions))):
                if batch and batch != list(range(len(batch))):
                    order.append((index, batch))
        elif name == "stablehlo.convolution":
            dims = stablehlo.ConvDimensionNumbers(op.attributes["dimension_numbers"])
            lhs = [dims.input_batch_dimension, *dims.input_spatial_dimensions,
                   dims.input_feature_dimension]
            rhs = [*dims.kernel_spatial_dimensions, dims.kernel_input_feature_dimension,
                   dims.kernel_output_feature_dimension]
            out = [dims.output_batch_dimension, *dims.output_spatial_dimensions,
                   dims.output_feature_dimension]
            for index, wanted in ((0, lhs), (1, rhs), (-1, out)):
                if wanted != list(range(len(wanted))):
                    order.append((index, wanted))
    except (KeyError, ValueError, AttributeError):
        return {}
    found = {}
    for index, _ in order:
        if index < 0:
            found[-1] = 1
        elif index < len(operands):
            operand = operands[index]
            found[index] = shard_bytes(operand.shape, operand.element_bytes,
                                       dim_axes(operand.sharding, len(operand.shape)))
    return found


def transposed_gather(shape, before, after, found) -> bool:
    """Whether XLA gathers in a transposed layout and copies back (twice the buffer).

    XLA's CPU all-gather concatenates along the major dimension: gathering a
    dimension with a longer dimension before it goes through a transposed
    copy of the operand, the gather, and a copy of the gathered buffer back.
    """
    kinds = {c.kind for c in found}
    if ALL_GATHER not in kinds or ALL_TO_ALL in kinds:
        return False
    old, new = shard_shape(shape, before), shard_shape(shape, after)
    for dim, (a, b) in enumerate(zip(old, new)):
        if b > a and any(n > 1 for n in new[:dim]):
            return True
    return False
