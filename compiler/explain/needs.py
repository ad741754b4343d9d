"""What each op needs besides its operands and results: reshard buffers, all-reduces, copies.

``OpNeeds.collect`` reads a propagated module once: per op, the operands
XLA reshards to what the op needs (one buffer per value and target), the
bytes of buffers live only while the op runs (gathers of returned values,
XLA:CPU's transposed copies, see ``layout``), the axes its result is
all-reduced over and, when the result is sliced after that all-reduce, the
bytes of the unsliced partial sums; and the explicit reshards that move data.
The liveness walk (``liveness``) turns them into buffers.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from shardc.compiler.cost.fusion import FREE, FUSIBLE
from shardc.compiler.cost.op_comm import computation_axes, required_sharding
from shardc.compiler.cost.report import collectives_at
from shardc.compiler.cost.reshard import (
    ALL_REDUCE,
    dim_axes,
    reshard_collectives,
    shard_bytes,
)
from shardc.compiler.explain.layout import relayout, transposed_gather
from shardc.compiler.propagation.values import ModuleValues

RESHARDS = frozenset({"sdy.reshard", "sdy.sharding_constraint"})
CONSTANTS = frozenset({"sdy.constant", "stablehlo.constant", "stablehlo.iota"})


@dataclass
class OpNeeds:
    """Per-op buffers and all-reduces beyond the op's own results."""

    extra: dict[int, int] = field(default_factory=dict)  # op -> bytes live while it runs
    # op -> [((operand value, target), bytes, transposed-copy bytes)] resharded operands
    needs: dict[int, list[tuple[tuple, int, int]]] = field(default_factory=dict)
    reduced: dict[int, tuple] = field(default_factory=dict)  # op -> all-reduced axes
    # result -> bytes of its partial sums when the all-reduce precedes a slice
    partial: dict[int, int] = field(default_factory=dict)
    moved: set[int] = field(default_factory=set)  # explicit reshards that move data

    @classmethod
    def collect(cls, values: ModuleValues) -> OpNeeds:
        """The needs of every op of ``values``' module."""
        found = cls()
        for op in range(len(values.graph.ops)):
            found._collect(values, op)
        return found

    def _collect(self, values: ModuleValues, op: int) -> None:
        """Record the reshard buffers and all-reduces op ``op`` needs."""
        graph = values.graph
        name = graph.op_name[op]
        if name in ("func.return", "func.call"):
            for entry in collectives_at(values, op):
                if entry.implicit and entry.kind != ALL_REDUCE:
                    self.extra[op] = self.extra.get(op, 0) + entry.bytes_per_device
            return
        if name in RESHARDS:
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
                if transposed_gather(src.shape, before, after, found):
                    self.extra[op] = self.extra.get(op, 0) + shard_bytes(
                        src.shape, src.element_bytes, after)
            return
        if not graph.op_results[op] or name in FREE:
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
        copied = relayout(graph.ops[op], name, operands, results)
        if copied.pop(-1, 0):  # a result in a non-canonical layout: transposed copy
            self.extra[op] = self.extra.get(op, 0) + sum(
                shard_bytes(r.shape, r.element_bytes, dim_axes(r.sharding, len(r.shape)))
                for r in results)
        for index, operand in enumerate(operands):
            value = graph.op_operands[op][index]
            owner = graph.value_def[value]
            if owner >= 0 and graph.op_name[owner] in CONSTANTS:
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
            copy = size if transposed_gather(operand.shape, before, after, found) else 0
            if index in copied:
                copy, copied[index] = max(copy, size), 0
            self.needs.setdefault(op, []).append(((value, tuple(after)), size, copy))
        for index, size in copied.items():
            if size:  # XLA copies it transposed as soon as the operand exists
                value = graph.op_operands[op][index]
                self.needs.setdefault(op, []).append(((value, ("transposed", op, index)), size, 0))
        if reduced:
            self.reduced[op] = tuple(sorted(str(a) for a in reduced))
            self._partial_sums(graph.op_results[op], results, reduced)

    def _partial_sums(self, values: list[int], results, reduced: set) -> None:
        """Record the unsliced partial-sum buffers of an op whose result is sharded
        over axes it also reduces over.

        XLA all-reduces the partial sums at the shape the op computed them in
        (those axes not sharding the result) and slices afterwards, the slice
        fused into each reader (``partition-id`` operands), so the all-reduce's
        full buffer lives as long as the sliced value is read. Seen in
        lm_linen_unconstrained's buffer assignment: the MLP up-projections
        contract over `data` and ``all-reduce.9``/``.19`` (f32[8,16,32], the
        whole batch) live from the forward to the gelu gradient.
        """
        for value, result in zip(values, results):
            axes = dim_axes(result.sharding, len(result.shape))
            if not any(axis in reduced for dim in axes for axis in dim):
                continue
            kept = [[axis for axis in dim if axis not in reduced] for dim in axes]
            self.partial[value] = shard_bytes(result.shape, result.element_bytes, kept)
