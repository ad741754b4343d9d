"""The collectives of a ``jax.experimental.custom_partitioning`` op, as XLA partitions it.

XLA's SPMD partitioner has no rule for such an op (a ``CustomSPMDPartitioning``
custom call): it asks jax's partition callback, which calls the user's
``partition`` with the operands' and the result's shardings and returns the
per-device body lowered for the shardings it chose. XLA then reshards every
operand to the sharding the body takes, inlines the body (its ``psum`` /
``all_gather``... are the op's own collectives) and reshards the body's result
to the op's sharding. The prediction asks the same callback the same question
(``jax_private.custom_partition``) and prices those three parts.
"""

from __future__ import annotations

import re

from jaxlib.mlir import ir

from shardc.compiler.cost.op_comm import OpCommunication, dims_text
from shardc.compiler.cost.reshard import Collective, collective_element_bytes, reshard_tensor
from shardc.compiler.propagation.values import element_bytes
from shardc.compiler.sharding.axes import full_axis
from shardc.compiler.sharding.tensor import DimSharding, Tensor, TensorSharding
from shardc.dialects import jax_private

CALL_TARGET = "CustomSPMDPartitioning"
# StableHLO collectives (written in manual code: a ``shard_map`` or this body): kind,
# and whether XLA's counted side is the result (all-gather) rather than the operand.
STABLEHLO_COLLECTIVES = {
    "stablehlo.all_gather": ("all-gather", True),
    "stablehlo.all_reduce": ("all-reduce", False),
    "stablehlo.all_to_all": ("all-to-all", False),
    "stablehlo.collective_permute": ("collective-permute", False),
    "stablehlo.reduce_scatter": ("reduce-scatter", False),
}
# MLIR element types as numpy names (others: the op is not predicted).
_NUMPY_NAMES = {"f64": "float64", "f32": "float32", "bf16": "bfloat16", "f16": "float16",
                "i1": "bool", "complex<f32>": "complex64", "complex<f64>": "complex128"}
_INTEGER = re.compile(r"(u?)i(8|16|32|64)$")


def is_custom_partitioned(ir_op: ir.Operation) -> bool:
    """Whether ``ir_op`` is a ``custom_partitioning`` op's custom call."""
    return (ir_op.name == "stablehlo.custom_call"
            and ir.StringAttr(ir_op.attributes["call_target_name"]).value == CALL_TARGET)


def custom_partitioned_needs(ir_op: ir.Operation, operands: list[Tensor | None],
                             results: list[Tensor | None], mesh, memo: dict
                             ) -> tuple[OpCommunication, ...] | None:
    """The collectives XLA's partitioner emits for the ``custom_partitioning`` op
    ``ir_op`` whose operands and results are ``operands`` / ``results`` (``mesh``:
    their ``MeshInfo``): operand reshards, the body's collectives, the result's
    reshard. None where the callback cannot be asked (it is gone, a sharding names a
    sub-axis, or a type has no numpy name); ``memo`` keeps answers per question."""
    answer = _partitioned(ir_op, operands, results, memo)
    if answer is None:
        return None
    body, operand_specs, result_specs = answer
    needs = []
    for index, (tensor, spec) in enumerate(zip(operands, operand_specs)):
        target = _sharding(spec, tensor, mesh)
        needs.extend(OpCommunication(index, f"the partition rule takes it {dims_text(target)}",
                                     collective, target=target.dims)
                     for collective in reshard_tensor(tensor, target, mesh))
    needs.extend(OpCommunication(None, "in the partition rule's body", collective)
                 for collective in body_collectives(body, ir_op.context))
    for tensor, spec in zip(results, result_specs):
        written = Tensor(tensor.shape, tensor.element_bytes, _sharding(spec, tensor, mesh),
                         tensor.dtype)
        reason = f"the partition rule returns it {dims_text(written.sharding)}"
        needs.extend(OpCommunication(None, reason, collective)
                     for collective in reshard_tensor(written, tensor.sharding, mesh))
    return tuple(needs)


def custom_partitioned_results(ir_op: ir.Operation, operands: list[Tensor | None],
                               results: list[Tensor | None], mesh, memo: dict
                               ) -> list[TensorSharding] | None:
    """The shardings the partition rule's body computes the results in (XLA then
    reshards them to the op's); None where ``custom_partitioned_needs`` is."""
    answer = _partitioned(ir_op, operands, results, memo)
    if answer is None:
        return None
    return [_sharding(spec, tensor, mesh) for tensor, spec in zip(results, answer[2])]


def custom_partitioned_body(ir_op: ir.Operation, operands: list[Tensor | None],
                            results: list[Tensor | None], mesh, memo: dict
                            ) -> tuple[bytes, list[TensorSharding]] | None:
    """The partition rule's per-device body (MLIR bytecode) and the shardings it
    takes its operands in (XLA reshards the operands to them and inlines the
    body); None where ``custom_partitioned_needs`` is."""
    answer = _partitioned(ir_op, operands, results, memo)
    if answer is None:
        return None
    body, operand_specs, _ = answer
    return body, [_sharding(spec, t, mesh) for t, spec in zip(operands, operand_specs)]


def _partitioned(ir_op: ir.Operation, operands: list[Tensor | None],
                 results: list[Tensor | None], memo: dict) -> tuple | None:
    """The partition callback's answer for these operands and results, asked once."""
    values = operands + results
    if any(t is None or t.sharding is None for t in values):
        return None
    described = [_described(t) for t in values]
    if any(d is None for d in described):
        return None
    key = ir.StringAttr(ir_op.attributes["backend_config"]).value
    question = (key, tuple((d[0], d[1], tuple(d[2])) for d in described))
    if question not in memo:
        memo[question] = jax_private.custom_partition(
            key, described[:len(operands)], described[len(operands):])
    return memo[question]


def body_collectives(body: bytes, context: ir.Context) -> list[Collective]:
    """The collectives a per-device body (MLIR bytecode) writes, at their shapes
    there (each device's): the partitioner inlines them as they are."""
    with context:
        module = ir.Module.parse(body)
    found: list[Collective] = []

    def visit(op: ir.Operation) -> None:
        written = STABLEHLO_COLLECTIVES.get(op.name)
        if written is not None:
            kind, result_side = written
            counted = op.results if result_side else op.operands
            found.append(Collective(kind, (), sum(_value_bytes(v.type) for v in counted)))
        for region in op.regions:
            for block in region.blocks:
                for inner in block.operations:
                    visit(inner.operation)

    visit(module.operation)
    return found


def _value_bytes(type_: ir.Type) -> int:
    if not isinstance(type_, ir.RankedTensorType):
        return 0
    shaped = type_
    count = 1
    for size in shaped.shape:
        count *= size
    return count * collective_element_bytes(element_bytes(type_), str(shaped.element_type))


def _described(tensor: Tensor) -> tuple | None:
    """(shape, numpy dtype name, ``PartitionSpec`` entries) of ``tensor``, as jax's
    callback takes it; None for a sub-axis or a type without a numpy name."""
    name = _NUMPY_NAMES.get(tensor.dtype or "")
    integer = _INTEGER.match(tensor.dtype or "")
    if integer:
        name = f"{'uint' if integer.group(1) else 'int'}{integer.group(2)}"
    if name is None:
        return None
    spec = []
    for dim in tensor.sharding.dims:
        if any(axis.size != axis.total for axis in dim.axes):
            return None
        names = tuple(axis.name for axis in dim.axes)
        spec.append(names[0] if len(names) == 1 else (names or None))
    return tensor.shape, name, tuple(spec)


def _sharding(spec, like: Tensor, mesh) -> TensorSharding:
    """``spec`` (a ``PartitionSpec``) as a closed sharding of ``like``'s rank on
    ``mesh`` (a ``MeshInfo``)."""
    dims = []
    for k in range(len(like.shape)):
        entry = spec[k] if k < len(spec) else None
        names = () if entry is None else (entry,) if isinstance(entry, str) else tuple(entry)
        dims.append(DimSharding(tuple(full_axis(n, mesh.sizes[n]) for n in names), True))
    return TensorSharding(like.sharding.mesh, tuple(dims))
