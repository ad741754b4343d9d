"""Per-device memory before compiling: arguments, outputs and the live peak of temporaries.

``estimate_memory(module)`` reads a propagated module (every value has its
final sharding) and adds up per-device shard bytes, a dimension its axes do
not divide counting padded like XLA pads it:

* arguments: the main function's arguments;
* outputs: its results, at their result shardings (plus XLA's table of
  one pointer per output when there are several);
* temporaries: a liveness walk over the main function in program order. A
  value is allocated by the op defining it and freed after its last use (a
  use inside a nested region counts at the op owning the region; a loop body's
  own peak is added while the loop runs). Values XLA never materialises are
  skipped: constants, and values of *fusible* ops (elementwise, broadcasts,
  reshapes, converts, iota, slices, selects) whose users are all fusible ops
  or reductions, since XLA fuses such producers into their consumer. Values
  returned from the function live in the output buffers, not in temporaries.
  The buffer a collective needs (a gathered operand, see
  ``shardc.compiler.cost``) is live while its consumer runs.

The figures compare with XLA's ``Compiled.memory_analysis()`` (argument,
output and temp bytes): ``bench/memory_estimate.py`` states the error per
benchmark program.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass

from jaxlib.mlir import ir

from shardc.compiler.cost.reshard import ALL_REDUCE
from shardc.compiler.cost.report import collectives_at
from shardc.compiler.cost.values import ModuleValues
from shardc.compiler.diagnostics import source_loc_of
from shardc.compiler.explain.grid import grid_of_sharding
from shardc.compiler.propagation.graph import ELEMENTWISE

_FREE = frozenset({"sdy.constant", "stablehlo.constant", "sdy.sharding_constraint",
                   "sdy.reshard", "stablehlo.optimization_barrier", "sdy.data_flow_edge",
                   "sdy.propagation_barrier", "stablehlo.get_tuple_element"})
FUSIBLE = ELEMENTWISE | frozenset({
    "stablehlo.broadcast_in_dim", "stablehlo.concatenate", "stablehlo.convert",
    "stablehlo.dynamic_slice", "stablehlo.iota", "stablehlo.pad", "stablehlo.reshape",
    "stablehlo.reverse", "stablehlo.slice", "stablehlo.transpose",
}) | _FREE
_POINTER_BYTES = 8
_FUSING_CONSUMERS = FUSIBLE | frozenset({"stablehlo.reduce", "func.return"})


@dataclass(frozen=True)
class Buffer:
    """One temporary buffer of the estimate."""

    name: str
    op: str
    loc: str | None
    bytes_per_device: int


@dataclass(frozen=True)
class MemoryEstimate:
    """Per-device bytes of one program, before compiling."""

    argument_bytes: int
    output_bytes: int
    temp_bytes: int
    peak_op: str | None
    peak_loc: str | None
    largest: tuple[Buffer, ...]

    @property
    def total_bytes(self) -> int:
        """Arguments + outputs + temporaries (what ``memory_analysis`` adds up too)."""
        return self.argument_bytes + self.output_bytes + self.temp_bytes

    def compare(self, stats) -> dict[str, float | None]:
        """Ratios estimate / XLA per field of a ``memory_analysis()`` result (None if 0)."""
        pairs = {
            "argument": (self.argument_bytes, stats.argument_size_in_bytes),
            "output": (self.output_bytes, stats.output_size_in_bytes),
            "temp": (self.temp_bytes, stats.temp_size_in_bytes),
            "total": (self.total_bytes, stats.argument_size_in_bytes
                      + stats.output_size_in_bytes + stats.temp_size_in_bytes),
        }
        return {k: (mine / xla if xla else (1.0 if mine == 0 else None))
                for k, (mine, xla) in pairs.items()}

    def format_text(self) -> str:
        """A short report: the three figures, where the peak is, the largest buffers."""
        lines = [f"arguments   {self.argument_bytes:>12} bytes/device",
                 f"outputs     {self.output_bytes:>12} bytes/device",
                 f"temporaries {self.temp_bytes:>12} bytes/device (live peak)",
                 f"total       {self.total_bytes:>12} bytes/device"]
        if self.peak_op:
            lines.append(f"peak at {self.peak_op} ({self.peak_loc or 'unknown location'})")
        for buffer in self.largest:
            lines.append(f"  {buffer.bytes_per_device:>10}  {buffer.name:<8} {buffer.op} "
                         f"({buffer.loc or '?'})")
        return "\n".join(lines) + "\n"

    def to_json(self) -> str:
        """The estimate as JSON."""
        data = asdict(self)
        data["total_bytes"] = self.total_bytes
        return json.dumps(data, indent=1)


class _Walker:
    def __init__(self, values: ModuleValues) -> None:
        self.values = values
        graph = values.graph
        self.graph = graph
        mesh = values.meshes.get(values.mesh) if values.mesh else None
        self.sizes = dict(mesh.sizes) if mesh is not None else {}
        self.extra: dict[int, int] = {}  # op -> bytes of gathered operands it needs
        for op in range(len(graph.ops)):
            for entry in collectives_at(values, op):
                if entry.implicit and entry.kind != ALL_REDUCE:
                    self.extra[op] = self.extra.get(op, 0) + entry.bytes_per_device
        self.buffers: list[Buffer] = []
        self.state = ir.AsmState(values.graph.module)

    def bytes_of(self, value: int) -> int:
        shape = self.graph.value_shape[value]
        if shape is None:
            return 0
        tensor = self.values.tensor(value)
        shard = grid_of_sharding(shape, tensor.sharding, self.sizes).shard_shape() \
            if self.sizes else shape
        total = tensor.element_bytes
        for n in shard:
            total *= n
        return total

    def materialised(self, value: int, op: int) -> bool:
        graph = self.graph
        name = graph.op_name[op]
        if name in _FREE:
            return False
        users = {graph.op_name[self.top_user(u, op)] for u, _ in graph.uses[value]}
        return not (name in FUSIBLE and users <= _FUSING_CONSUMERS)

    def top_user(self, user: int, block_owner_child: int) -> int:
        """The op of ``block_owner_child``'s block that contains ``user``."""
        graph = self.graph
        parent = graph.op_parent[block_owner_child]
        while graph.op_parent[user] != parent and graph.op_parent[user] >= 0:
            user = graph.op_parent[user]
        return user

    def peak(self, ops: list[int], returned: set[int]) -> tuple[int, int]:
        """Live peak of one block's ops (and the op where it is reached)."""
        graph = self.graph
        position = {op: i for i, op in enumerate(ops)}
        frees: dict[int, list[tuple[int, int]]] = {}
        live, best, best_op = 0, 0, -1
        for i, op in enumerate(ops):
            allocated = []
            for value in graph.op_results[op]:
                if value in returned or not self.materialised(value, op):
                    continue
                size = self.bytes_of(value)
                last = max((position.get(self.top_user(u, op), i) for u, _ in graph.uses[value]),
                           default=i)
                allocated.append((value, size, last))
            inner = max((self.peak(nested, set()) [0] for _, nested in graph.op_blocks[op]),
                        default=0)
            now = live + sum(s for _, s, _ in allocated) + inner + self.extra.get(op, 0)
            if now > best:
                best, best_op = now, op
            for value, size, last in allocated:
                live += size
                frees.setdefault(max(last, i), []).append((value, size))
                self.buffers.append(Buffer(graph.values[value].get_name(self.state),
                                           graph.op_name[op], _loc(graph.ops[op]), size))
            for _, size in frees.pop(i, []):
                live -= size
        return best, best_op


def _loc(op: ir.Operation) -> str | None:
    loc = source_loc_of(op.location)
    return f"{loc.file}:{loc.line}" if loc else None


def _main(values: ModuleValues) -> int:
    funcs = values.funcs
    return funcs.get("main", next(iter(funcs.values()), -1))


def estimate_memory(module: ir.Operation, *, top: int = 5) -> MemoryEstimate:
    """The estimate for an already propagated ``module`` (see the module docstring)."""
    values = ModuleValues(module, missing_as_replicated=True)
    walker = _Walker(values)
    graph = values.graph
    func = _main(values)
    if func < 0 or not graph.op_blocks[func]:
        return MemoryEstimate(0, 0, 0, None, None, ())
    args, ops = graph.op_blocks[func][0]
    argument_bytes = sum(walker.bytes_of(a) for a in args)
    ret = ops[-1]
    results = values.store.func_results.get(func, [])
    output_bytes = 0
    for k, value in enumerate(graph.op_operands[ret]):
        sharding = values.store.value[results[k]] if k < len(results) else None
        shape = graph.value_shape[value]
        if shape is not None and sharding is not None and walker.sizes:
            tensor = values.tensor(value)
            shard = grid_of_sharding(shape, sharding, walker.sizes).shard_shape()
            size = tensor.element_bytes
            for n in shard:
                size *= n
            output_bytes += size
        else:
            output_bytes += walker.bytes_of(value)
    if len(graph.op_operands[ret]) > 1:
        output_bytes += _POINTER_BYTES * len(graph.op_operands[ret])  # XLA's tuple of outputs
    temp, peak_op = walker.peak(ops, set(graph.op_operands[ret]))
    largest = tuple(sorted(walker.buffers, key=lambda b: -b.bytes_per_device)[:top])
    return MemoryEstimate(argument_bytes, output_bytes, temp,
                          graph.op_name[peak_op] if peak_op >= 0 else None,
                          _loc(graph.ops[peak_op]) if peak_op >= 0 else None, largest)
