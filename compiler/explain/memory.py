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
* reshard buffers: an operand resharded to what its op needs (gathered,
  all-to-all'ed, or sliced for a non-fusible op) is one buffer per (value,
  target sharding), live from its first to its last consumer (XLA reuses it);
  an argument's reshard is live from the block's start (XLA schedules it
  first); a gather along a dimension with a longer one before it adds a
  transposed copy of the gathered buffer. Explicit reshards that move data
  are buffers too; implicit reshards of returned values and call operands
  are live while their op runs;
* transposed copies XLA's CPU kernels make of batched-dot operands whose batch
  dimensions are not leading and of convolution operands/results not in
  ``b01f_01io->b01f``, from when the operand exists to the consumer;
* all-reduces over the same axes that do not depend on one another are
  combined: their results stay live until the last of them;
* in place: ``while`` results reuse their carries (a carry the body returns
  unchanged is its init value), ``dynamic_update_slice``/``scatter`` their
  dying operand, and a reshape shares its operand's buffer.

Each rule was read off XLA's buffer assignment (``--xla_dump_to``).

The figures compare with XLA's ``Compiled.memory_analysis()`` (argument,
output and temp bytes): ``bench/memory_estimate.py`` states the error per
benchmark program.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass

from jaxlib.mlir import ir
from jaxlib.mlir.dialects import stablehlo

from shardc.compiler.cost.fusion import FREE as _FREE
from shardc.compiler.cost.fusion import FUSIBLE, FUSING_CONSUMERS
from shardc.compiler.cost.op_comm import computation_axes, required_sharding
from shardc.compiler.cost.report import collectives_at
from shardc.compiler.cost.reshard import (
    ALL_GATHER,
    ALL_REDUCE,
    ALL_TO_ALL,
    dim_axes,
    reshard_collectives,
    shard_bytes,
    shard_shape,
)
from shardc.compiler.diagnostics import source_loc_of
from shardc.compiler.explain.grid import grid_of_sharding
from shardc.compiler.propagation.values import ModuleValues

_POINTER_BYTES = 8
# ops whose result k XLA writes into the buffer of one operand when that dies there
_IN_PLACE = {"stablehlo.while": lambda k: k, "stablehlo.dynamic_update_slice": lambda k: 0,
             "stablehlo.scatter": lambda k: k}
_PASS_ON = frozenset({"sdy.data_flow_edge", "sdy.sharding_constraint", "sdy.reshard",
                      "sdy.propagation_barrier"})
_RESHARDS = frozenset({"sdy.reshard", "sdy.sharding_constraint"})
_CONSTANTS = frozenset({"sdy.constant", "stablehlo.constant", "stablehlo.iota"})
# A returned value fuses into its output buffer (counted as an output, not a temporary).
_FUSING_CONSUMERS = FUSING_CONSUMERS | frozenset({"func.return"})


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
        # op -> [((operand value, target), bytes, transposed-copy bytes)] resharded operands
        self.needs: dict[int, list[tuple[tuple, int, int]]] = {}
        self.reduced: dict[int, tuple] = {}  # op -> axes its result is all-reduced over
        self.moved: set[int] = set()  # results of explicit reshards that move data
        self.block_args: dict[int, list[int]] = {}  # first op of a block -> its arguments
        for op in range(len(graph.ops)):
            self._collect(op)
            for block_args, block_ops in graph.op_blocks[op]:
                if block_ops:
                    self.block_args[block_ops[0]] = block_args
        self.buffers: list[Buffer] = []
        self.state = ir.AsmState(values.graph.module)

    def _collect(self, op: int) -> None:
        """Record the reshard buffers and all-reduces op ``op`` needs."""
        graph, values = self.graph, self.values
        name = graph.op_name[op]
        if name in ("func.return", "func.call"):
            for entry in collectives_at(values, op):
                if entry.implicit and entry.kind != ALL_REDUCE:
                    self.extra[op] = self.extra.get(op, 0) + entry.bytes_per_device
            return
        if name in _RESHARDS:
            src = values.tensor(graph.op_operands[op][0])
            result = graph.op_results[op][0]
            dst = values.sharding(result)
            if src is None or dst is None:
                return
            rank = len(src.shape)
            before, after = dim_axes(src.sharding, rank), dim_axes(dst, rank)
            if before == after:
                return
            found = reshard_collectives(src.shape, src.element_bytes, src.sharding, dst,
                                        values.mesh_of(src.sharding, dst))
            if found:
                self.moved.add(result)
                if _transposed_gather(src.shape, before, after, found):
                    self.extra[op] = self.extra.get(op, 0) + shard_bytes(
                        src.shape, src.element_bytes, after)
            return
        if not graph.op_results[op] or name in _FREE:
            return
        ruled = values.rule_tensors(op)
        if ruled is None:
            return
        rule, operands, results = ruled
        if all(r.sharding is None for r in results):
            return
        mesh = values.mesh_of(*(t.sharding for t in results + operands))
        factor_axes, reduction = computation_axes(rule, operands, results, mesh)
        reduced = {axis for axes in reduction.values() for axis in axes}
        relayout = _relayout(graph.ops[op], name, operands, results)
        if relayout.pop(-1, 0):  # a result in a non-canonical layout: transposed copy
            self.extra[op] = self.extra.get(op, 0) + sum(
                shard_bytes(r.shape, r.element_bytes, dim_axes(r.sharding, len(r.shape)))
                for r in results)
        for index, operand in enumerate(operands):
            value = graph.op_operands[op][index]
            owner = graph.value_def[value]
            if owner >= 0 and graph.op_name[owner] in _CONSTANTS:
                continue  # XLA folds a reshaped constant
            needed = required_sharding(rule, index, operand, factor_axes)
            if needed is None:
                continue
            rank = len(operand.shape)
            before, after = dim_axes(operand.sharding, rank), dim_axes(needed, rank)
            if before == after:
                continue
            found = reshard_collectives(operand.shape, operand.element_bytes,
                                        operand.sharding, needed, mesh)
            if not found and name in FUSIBLE:
                continue  # a local slice fuses into an elementwise consumer
            size = shard_bytes(operand.shape, operand.element_bytes, after)
            copy = size if _transposed_gather(operand.shape, before, after, found) else 0
            if index in relayout:
                copy, relayout[index] = max(copy, size), 0
            self.needs.setdefault(op, []).append(((value, tuple(after)), size, copy))
        for index, size in relayout.items():
            if size:  # XLA copies it transposed as soon as the operand exists
                value = graph.op_operands[op][index]
                self.needs.setdefault(op, []).append(((value, ("transposed", op, index)), size, 0))
        if reduced:
            self.reduced[op] = tuple(sorted(str(a) for a in reduced))

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
        if name in _FREE and value not in self.moved:
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

    def operands_within(self, op: int) -> list[int]:
        """Operands of ``op`` and of every op nested in its regions."""
        found = list(self.graph.op_operands[op])
        for _, nested in self.graph.op_blocks[op]:
            for inner in nested:
                found.extend(self.operands_within(inner))
        return found

    def root(self, value: int) -> int:
        """``value`` seen through ops that pass their operand on unchanged."""
        graph = self.graph
        while (graph.value_def[value] >= 0 and value not in self.moved
               and graph.op_name[graph.value_def[value]] in _PASS_ON
               and graph.op_operands[graph.value_def[value]]):
            value = graph.op_operands[graph.value_def[value]][0]
        return value

    @staticmethod
    def _extend(frees: dict[int, list[tuple[int, int]]], value: int, last: int) -> bool:
        """Keep ``value``'s buffer (if it is live) until position ``last``."""
        for at, entries in list(frees.items()):
            for entry in entries:
                if entry[0] == value:
                    if at < last:
                        entries.remove(entry)
                        frees.setdefault(last, []).append(entry)
                    return True
        return False

    def passed_through(self, op: int, k: int) -> bool:
        """Whether ``op`` is a while loop whose body returns its carry ``k`` unchanged."""
        graph = self.graph
        if graph.op_name[op] != "stablehlo.while" or len(graph.op_blocks[op]) < 2:
            return False
        args, body = graph.op_blocks[op][1]
        if not body or k >= len(args):
            return False
        returned = graph.op_operands[body[-1]]
        return k < len(returned) and returned[k] == args[k]

    def combined(self, ops: list[int]) -> dict[int, int]:
        """Results of all-reduces XLA combines: value -> position of the combined op.

        XLA's all-reduce combiner merges all-reduces over the same axes that do
        not depend on one another into one, run where the last of them is; all
        their results are live together there.
        """
        graph = self.graph
        extend: dict[int, int] = {}
        group: list[tuple[int, int]] = []
        tainted: set[int] = set()
        axes = None

        def close() -> None:
            if len(group) > 1:
                for _, member in group:
                    for value in graph.op_results[member]:
                        extend[value] = group[-1][0]

        for i, op in enumerate(ops):
            depends = any(v in tainted for v in self.operands_within(op))
            if op in self.reduced:
                if depends or self.reduced[op] != axes:
                    close()
                    group, tainted, axes = [], set(), self.reduced[op]
                group.append((i, op))
                tainted.update(graph.op_results[op])
            elif depends:
                tainted.update(graph.op_results[op])
        close()
        return extend

    def peak(self, ops: list[int], returned: set[int]) -> tuple[int, int]:
        """Live peak of one block's ops (and the op where it is reached)."""
        graph = self.graph
        position = {op: i for i, op in enumerate(ops)}
        # XLA reshards a value once per target sharding and reuses it (CSE): the
        # buffer is live from the first consumer to the last one in this block.
        spans: dict[tuple, list[int]] = {}
        copies: dict[int, int] = {}
        for i, op in enumerate(ops):
            for key, size, copy in self.needs.get(op, ()):
                if key in spans:
                    spans[key][1] = i
                else:
                    spans[key] = [i, i, size]
                    copies[i] = copies.get(i, 0) + copy
        # XLA's scheduler runs a reshard of an argument first thing: it depends on
        # nothing else, so its buffer is live from the block's start.
        # A transposed copy XLA makes for a dot or convolution is scheduled right
        # after its operand is computed.
        args = set(self.block_args.get(ops[0], ())) if ops else set()
        gathered: dict[int, list[tuple[int, int]]] = {}
        for (value, target), (first, last, size) in spans.items():
            if value in args:
                first = 0
            elif target[0] == "transposed" and self.graph.value_def[value] >= 0:
                first = min(first, position.get(
                    self.top_user(self.graph.value_def[value], ops[0]), first))
            gathered.setdefault(first, []).append((size, last))
        extend = self.combined(ops)
        owner = graph.op_name[graph.op_parent[ops[0]]] if ops else ""
        carries = args if owner == "stablehlo.while" else set()
        frees: dict[int, list[tuple[int, int]]] = {}
        live, best, best_op = 0, 0, -1
        for i, op in enumerate(ops):
            allocated = [(None, size, last) for size, last in gathered.get(i, ())]
            for k, value in enumerate(graph.op_results[op]):
                if value in returned or not self.materialised(value, op):
                    continue
                size = self.bytes_of(value)
                last = max((position.get(self.top_user(u, op), i) for u, _ in graph.uses[value]),
                           default=i)
                last = max(last, extend.get(value, i))
                if graph.op_name[op] == "stablehlo.reshape":
                    # a reshape of a row-major array is a bitcast in XLA: it shares its
                    # operand's buffer (an argument's, or a live temporary's)
                    operand = self.root(graph.op_operands[op][0])
                    if graph.value_def[operand] < 0 or self._extend(frees, operand, last):
                        continue
                source = _IN_PLACE.get(graph.op_name[op], lambda k: None)(k)
                if source is not None and source < len(graph.op_operands[op]):
                    operand = graph.op_operands[op][source]
                    if operand in carries:
                        continue  # updated in the loop-carried buffer
                    if self.passed_through(op, k):
                        # a carry the loop body returns unchanged is its init value: XLA
                        # hoists it out of the loop; the init buffer lives on instead
                        self._extend(frees, operand, last)
                        continue
                    dying = [entry for entry in frees.get(i, []) if entry[0] == operand]
                    if dying and dying[0][1] >= size:
                        # the result takes over its operand's buffer (XLA updates in place)
                        frees[i].remove(dying[0])
                        frees.setdefault(max(last, i), []).append(dying[0])
                        continue
                allocated.append((value, size, last))
            inner = max((self.peak(nested, set()) [0] for _, nested in graph.op_blocks[op]),
                        default=0)
            now = (live + sum(s for _, s, _ in allocated) + inner + self.extra.get(op, 0)
                   + copies.get(i, 0))
            if now > best:
                best, best_op = now, op
            for value, size, last in allocated:
                live += size
                frees.setdefault(max(last, i), []).append((value, size))
                if value is not None:
                    self.buffers.append(Buffer(graph.values[value].get_name(self.state),
                                               graph.op_name[op], _loc(graph.ops[op]), size))
            for _, size in frees.pop(i, []):
                live -= size
        return best, best_op


def _relayout(op: ir.Operation, name: str, operands, results) -> dict[int, int]:
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


def _transposed_gather(shape, before, after, found) -> bool:
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
