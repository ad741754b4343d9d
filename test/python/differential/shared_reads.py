"""Random programs (the differential generator) read once, and random starting shardings
for their ops: what the tests of ``propagation.SharedRead`` and of re-propagation
(``Propagation.repropagate``) propagate."""

from __future__ import annotations

import random

from differential.test_propagation_differential import gen, rand_sharding
from jaxlib.mlir import ir

from shardc.compiler.propagation import SharedRead
from shardc.compiler.propagation.graph import ReadMemo
from shardc.compiler.propagation.ir_access import PER_VALUE
from shardc.dialects.sdy import SHARDING_ATTR

SEEDS = 300


def startable_ops(read: SharedRead) -> list[int]:
    """Ops whose one result's sharding is read from their own ``sdy.sharding``."""
    graph, store = read.graph, read.store
    return [op for op, results in enumerate(graph.op_results)
            if len(results) == 1 and store.slot_of[results[0]] >= 0
            and store.where[store.slot_of[results[0]]] == (PER_VALUE, op, SHARDING_ATTR, 0)]


def generated_reads(context: ir.Context):
    """``(seed, text, module, read)`` of each program of the differential generator that
    parses with static shapes (``read``: a ``SharedRead`` of a clone, usable or not)."""
    for seed in range(SEEDS):
        text = gen(seed)
        try:
            module = ir.Module.parse(text, context)
            read = SharedRead(module.operation.clone(), memo=ReadMemo())
        except Exception:  # programs the generator gets wrong, or dynamic shapes
            continue
        yield seed, text, module, read


def mesh_axes(text: str) -> list[tuple[str, int]]:
    """The (name, size) axes of a generated program's mesh."""
    axes = (axis.split("=") for axis in text.split("<[")[1].split("]>")[0].split(", "))
    return [(name.strip('"'), int(size)) for name, size in axes]


def random_start(rng: random.Random, read: SharedRead, mesh: list[tuple[str, int]], op: int,
                 context: ir.Context) -> ir.Attribute:
    """A random ``sdy.sharding`` for op ``op``'s one result."""
    shape = read.graph.value_shape[read.graph.op_results[op][0]]
    return ir.Attribute.parse(
        "#sdy.sharding_per_value<[" + rand_sharding(rng, mesh, shape) + "]>", context)
