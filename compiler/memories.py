"""Memory kinds through ``jit``, as jax.jit lowers them.

A sharding given to ``jit`` may name the memory its value lives in
(``NamedSharding(..., memory_kind="pinned_host")``). As soon as one argument or
result asks for a memory other than ``"device"``, jax's lowering writes every
argument's and result's memory kind on ``@main`` (``mhlo.memory_kind``) and
places each result in its memory through an ``annotate_device_placement``
custom call; XLA then compiles the transfers. ``write_memory_kinds`` does the
same on shardc's module (jax traced it without the shardings); when every
memory is the device's, the module is left as jax.jit leaves it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec, SingleDeviceSharding
from jaxlib.mlir import ir
from jaxlib.mlir.dialects import func as func_dialect
from jaxlib.mlir.dialects import stablehlo

from shardc.compiler import annotation
from shardc.compiler.signature import LeafSignature
from shardc.dialects import jax_private
from shardc.runtime import tokens

MEMORY_KIND_ATTR = "mhlo.memory_kind"
DEVICE_MEMORY = "device"
PLACEMENT_TARGET = "annotate_device_placement"


def on_its_device(sharding: SingleDeviceSharding) -> NamedSharding | None:
    """How a ``SingleDeviceSharding`` given for a result is lowered: in a memory other
    than the device's, as a sharding of its device alone (an axis-less mesh, what
    jax.jit writes for it: ``@empty_mesh``) in that memory, so the result is placed
    there; else None (the program runs on that device, ``options``)."""
    if sharding.memory_kind in (None, DEVICE_MEMORY):
        return None
    alone = Mesh(np.array(sharding._device, dtype=object).reshape(()), ())
    return NamedSharding(alone, PartitionSpec(), memory_kind=sharding.memory_kind)


def given_on_one_device(results: Sequence[LeafSignature], given: Sequence
                        ) -> list[LeafSignature]:
    """The results with each ``SingleDeviceSharding`` given for one (``given``: per
    result, as given to jit) kept as the sharding it comes back with, as jax.jit's."""
    return [dataclasses.replace(leaf, placed_as=entry)
            if isinstance(entry, SingleDeviceSharding) else leaf
            for leaf, entry in zip(results, given)]


def memory_kind(leaf: LeafSignature) -> str | None:
    """The memory a value is asked to live in: its sharding's where one is given (a
    committed argument's own), else the one its type says (an array in host memory);
    None: none asked."""
    if leaf.sharding is not None:
        return leaf.sharding.memory_kind
    return _type_memory_kind(leaf)


def result_memory_kind(leaf: LeafSignature) -> str | None:
    """The memory a result is compiled into once any memory is not the device's, as
    jax lowers it: the one asked for it, else its traced type's (the device's where
    the type says none)."""
    if tokens.is_token(leaf.aval):
        return None
    return memory_kind(leaf) or _type_memory_kind(leaf) or DEVICE_MEMORY


def _type_memory_kind(leaf: LeafSignature) -> str | None:
    return None if leaf.memory_space is None else jax_private.memory_kind_of_space(
        leaf.memory_space)


def write_memory_kinds(module: ir.Module, args: Sequence[LeafSignature],
                       results: Sequence[LeafSignature],
                       offsets: tuple[int, int] = (0, 0)) -> None:
    """Write the memory kinds on ``@main`` and place the results asked for in theirs
    (jax's ``lower_jaxpr_to_module`` with a memory other than the device's);
    ``offsets``: where ``args`` and ``results`` start among ``@main``'s
    (``annotation.user_offsets``)."""
    arg_kinds = [memory_kind(leaf) for leaf in args]
    result_kinds = [result_memory_kind(leaf) for leaf in results]
    if all(kind in (None, DEVICE_MEMORY) for kind in (*arg_kinds, *result_kinds)):
        return
    func = annotation.main_function(module)
    for which, kinds, offset in (("args", arg_kinds, offsets[0]),
                                 ("results", result_kinds, offsets[1])):
        annotation.set_function_attrs(
            func, MEMORY_KIND_ATTR,
            [None if kind is None else ir.StringAttr.get(kind) for kind in kinds], which, offset)
    # Only a memory given to jit is a transfer: one the type says is where XLA computes it.
    _place_results(func, [None] * offsets[1] + [
        None if leaf.sharding is None else leaf.sharding.memory_kind for leaf in results])
    # A buffer is only aliased within its memory, as in jax.
    annotation.donate_only_where(func, args, results,
                                 lambda arg, out: memory_kind(arg) == memory_kind(out), offsets)


def _place_results(func: ir.Operation, kinds: Sequence[str | None]) -> None:
    """Route each returned value with a memory kind through a placement custom call."""
    block = func.regions[0].blocks[0]
    returned = block.operations[len(block.operations) - 1]
    operands = list(returned.operands)
    here = ir.InsertionPoint(returned)
    placed = []
    for value, kind in zip(operands, kinds):
        if kind is None:
            placed.append(value)
            continue
        op = stablehlo.CustomCallOp(
            [value.type], [value], call_target_name=PLACEMENT_TARGET,
            has_side_effect=True, backend_config=ir.StringAttr.get(""),
            api_version=ir.IntegerAttr.get(ir.IntegerType.get_signless(32), 1),
            loc=returned.location, ip=here)
        op.attributes["mhlo.frontend_attributes"] = ir.DictAttr.get(
            {"_xla_buffer_placement": ir.StringAttr.get(kind)})
        placed.append(op.result)
    func_dialect.ReturnOp(placed, loc=returned.location, ip=here)
    returned.erase()
