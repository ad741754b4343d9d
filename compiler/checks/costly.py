"""Warnings for shardings that compile but cost memory or communication.

* ``indivisible-dimension``: a dimension its axes do not divide; XLA pads it
  to the next multiple, and the message says how much of each shard is
  padding.
* ``implicit-reshard``: an operand (or returned value) whose sharding is not
  the one its op needs, with the collective XLA will insert and its bytes per
  device (``shardc.compiler.cost``); all-reduces of sharded reductions are the
  intended communication of a sharded contraction and are not reported.
* ``replicated-large-tensor``: a tensor of at least the threshold size whose
  sharding uses no axis, so every device holds all of it.
* ``replicated-output``: a public function result left replicated although
  an argument is sharded.
"""

from __future__ import annotations

from collections.abc import Iterator

from shardc.compiler.checks.diagnostic import ShardingDiagnostic, at
from shardc.compiler.checks.structural import device_count, enclosing_manual
from shardc.compiler.cost.report import collectives_at
from shardc.compiler.cost.reshard import ALL_REDUCE
from shardc.compiler.diagnostics import Severity
from shardc.compiler.propagation.values import ModuleValues, element_bytes
from shardc.compiler.sharding.axes import size_product
from shardc.compiler.sharding.tensor import TensorSharding


def _sharded_values(values: ModuleValues) -> Iterator[tuple[int, TensorSharding]]:
    """Each value with a sharding, once per storage slot (edges share one)."""
    seen: set[int] = set()
    graph, store = values.graph, values.store
    for value in range(len(graph.values)):
        slot = store.slot_of[value]
        if slot < 0 or slot in seen or graph.value_shape[value] is None:
            continue
        seen.add(slot)
        sharding = values.sharding(value)
        if sharding is not None and len(sharding.dims) == len(graph.value_shape[value]):
            yield value, sharding


def _op_of(values: ModuleValues, value: int):
    graph = values.graph
    op = graph.value_def[value]
    return graph.ops[op if op >= 0 else graph.value_owner[value]]


def _axes_text(axes) -> str:
    return ", ".join(map(str, axes))


def _indivisible(values: ModuleValues) -> list[ShardingDiagnostic]:
    found = []
    for value, sharding in _sharded_values(values):
        shape = values.graph.value_shape[value]
        for d, (size, dim) in enumerate(zip(shape, sharding.dims)):
            n = size_product(dim.axes)
            if n <= 1 or size % n == 0:
                continue
            padded = -(-size // n) * n
            waste = 100 * (padded - size) // padded
            found.append(at(_op_of(values, value), "indivisible-dimension", Severity.WARNING,
                            f"dimension {d} of size {size} is not divisible by {n} "
                            f"({_axes_text(dim.axes)}): XLA pads it to {padded}, {waste}% of "
                            "each shard is padding"))
    return found


def _implicit_reshards(values: ModuleValues, threshold: int) -> list[ShardingDiagnostic]:
    found = []
    for op in range(len(values.graph.ops)):
        for entry in collectives_at(values, op):
            if not entry.implicit or entry.kind == ALL_REDUCE:
                continue
            if entry.bytes_per_device < threshold:
                continue
            axes = ", ".join(f'"{a}"' for a in entry.axes)
            found.append(at(values.graph.ops[op], "implicit-reshard", Severity.WARNING,
                            f"implicit reshard: {entry.tensor} needs {_article(entry.kind)} "
                            f"{entry.kind} over "
                            f"{axes}, {entry.bytes_per_device} bytes per device "
                            f"({entry.reason})"))
    return found


def _article(kind: str) -> str:
    return "an" if kind[0] in "aeiou" else "a"


def _global_bytes(values: ModuleValues, value: int) -> int:
    total = element_bytes(values.graph.values[value].type)
    for size in values.graph.value_shape[value]:
        total *= size
    return total


def _replicated_large(values: ModuleValues, threshold: int) -> list[ShardingDiagnostic]:
    found = []
    for value, sharding in _sharded_values(values):
        mesh = values.meshes.get(sharding.mesh)
        devices = device_count(mesh) if mesh is not None else None
        if not devices or devices == 1 or any(dim.axes for dim in sharding.dims):
            continue
        size = _global_bytes(values, value)
        op = values.graph.value_def[value]
        inside_manual = enclosing_manual(values, op if op >= 0 else
                                          values.graph.value_owner[value]) >= 0
        if size < threshold or inside_manual:
            continue
        found.append(at(_op_of(values, value), "replicated-large-tensor", Severity.WARNING,
                        f"{values.graph.values[value].type} ({size} bytes) is replicated on all "
                        f"{devices} devices of @{sharding.mesh}"))
    return found


def _is_public(func) -> bool:
    attrs = func.attributes
    return "sym_visibility" not in attrs or str(attrs["sym_visibility"]).strip('"') == "public"


def _replicated_outputs(values: ModuleValues) -> list[ShardingDiagnostic]:
    graph, store = values.graph, values.store
    found = []
    for func, results in store.func_results.items():
        if not _is_public(graph.ops[func]) or not graph.op_blocks[func]:
            continue
        args = graph.op_blocks[func][0][0]
        sharded = [k for k, a in enumerate(args)
                   if (s := store.get(a)) is not None and any(d.axes for d in s.dims)]
        ret = graph.op_blocks[func][0][1][-1]
        if not sharded or graph.op_name[ret] != "func.return":
            continue
        for k, value in enumerate(graph.op_operands[ret]):
            sharding = store.value[results[k]] if k < len(results) else None
            if sharding is None and values.mesh is None:
                continue  # unknown until propagation (or XLA) decides
            if not graph.value_shape[value] or (
                    sharding is not None and any(d.axes for d in sharding.dims)):
                continue
            defining = graph.value_def[value]
            where = graph.ops[defining if defining >= 0 else ret]
            found.append(at(where, "replicated-output", Severity.WARNING,
                            f"result {k} ({graph.values[value].type}) is replicated although "
                            f"argument {sharded[0]} is sharded: every device holds all "
                            f"{_global_bytes(values, value)} bytes"))
    return found


def check(values: ModuleValues, *, replicated_threshold: int,
          reshard_threshold: int) -> list[ShardingDiagnostic]:
    """Every cost warning of the module."""
    return (_indivisible(values) + _implicit_reshards(values, reshard_threshold)
            + _replicated_large(values, replicated_threshold) + _replicated_outputs(values))
