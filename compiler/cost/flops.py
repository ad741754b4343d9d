"""Per-device floating-point operations of a propagated module, counted as XLA counts them.

``module_flops(reader)`` walks a module whose values carry their shardings
(``ModuleValues``) and counts, for one device, the operations of each op on
its shard, by the rules of XLA's ``HloCostAnalysis`` (what
``Compiled.cost_analysis()["flops"]`` reports for the partitioned module):

* a dot: 2 x its result's elements x the length of its contracting
  dimensions on the device (each output element is that many fused
  multiply-adds); a convolution: 2 x the multiply-adds of the kernel positions
  that fall inside the (padded, dilated) input, summed per spatial dimension;
* an elementwise op (arithmetic, comparisons, selects, conversions, bit
  operations): one per result element; transcendental ones (exp, log, tanh,
  rsqrt, power...) are a separate count in XLA and none here;
* a reduction: its body's operations once per element folded away (operand
  elements minus result elements), the same for scatter (per update element),
  windows and maps; a sort n log n of its first operand;
* collectives: none here; XLA prices an all-reduce at one operation per
  element of its buffer, which ``step_time`` adds from ``comm_report``;
* loops: the body's count times its static trip count (``per_step``), or
  once (``once``: what XLA's analysis reports, it does not read trip
  counts); a conditional: its most costly branch; a call: its callee's count.

Shapes are each value's shard (dimensions divided, rounded up, by their axes).
What XLA's optimisations change (constant folding, algebraic rewrites, the
partitioner's masks and index arithmetic) is not modelled; those are
elementwise ops on small or scalar values next to a program's dots.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from math import ceil, log2, prod

from jaxlib.mlir import ir
from jaxlib.mlir.dialects import stablehlo

from shardc.compiler.cost.platforms import active_rules
from shardc.compiler.cost.reshard import dim_axes, shard_shape
from shardc.compiler.cost.trips import trip_count
from shardc.compiler.propagation.values import ModuleValues
from shardc.compiler.sharding.axes import size_product
from shardc.compiler.sharding.rules.elementwise import CHLO_POINTWISE_OPS, POINTWISE_OPS

# XLA counts these in ``transcendentals``, not ``flops``.
TRANSCENDENTAL = frozenset({
    "stablehlo.atan2", "stablehlo.cbrt", "stablehlo.cosine", "stablehlo.exponential",
    "stablehlo.exponential_minus_one", "stablehlo.log", "stablehlo.log_plus_one",
    "stablehlo.logistic", "stablehlo.power", "stablehlo.rsqrt", "stablehlo.sine",
    "stablehlo.sqrt", "stablehlo.tan", "stablehlo.tanh", "chlo.erf", "chlo.acosh",
    "chlo.tan",
})
# One operation per result element (XLA's ``HandleElementwiseOp``).
ELEMENTWISE = frozenset(
    {*POINTWISE_OPS, *CHLO_POINTWISE_OPS, "stablehlo.select", "stablehlo.clamp",
     "stablehlo.bitcast_convert"}
    - TRANSCENDENTAL
    - {"sdy.sharding_constraint", "stablehlo.all_reduce", "stablehlo.collective_broadcast",
       "stablehlo.collective_permute", "stablehlo.cross-replica-sum"})
# Ops whose body is applied per element, and how many times (``_applied``).
_BODY_OPS = frozenset({"stablehlo.reduce", "stablehlo.reduce_window", "stablehlo.scatter",
                       "stablehlo.select_and_scatter", "stablehlo.map"})
_FMA = 2  # XLA counts a fused multiply-add as two operations
# Elementwise ops XLA's fusion never copies into several consumers (its
# ``IsExpensive``): each runs once, in a fusion of its own where it has several users.
_EXPENSIVE = frozenset({*TRANSCENDENTAL, "stablehlo.divide", "stablehlo.remainder",
                        "stablehlo.sqrt"})
# Ops a fusion passes data through without arithmetic: a cheap producer is fused
# through them into whatever consumes them.
_THROUGH = frozenset({"stablehlo.broadcast_in_dim", "stablehlo.reshape", "stablehlo.transpose",
                      "stablehlo.slice", "stablehlo.concatenate", "stablehlo.pad",
                      "stablehlo.reverse", "stablehlo.dynamic_slice", "sdy.sharding_constraint",
                      "sdy.reshard"})


# Ops whose count ``op_key`` decides (a convolution's windows are attributes it omits).
_KEYED = frozenset({*ELEMENTWISE, "stablehlo.dot_general"})


@dataclass(frozen=True)
class Flops:
    """One device's operations: per step (loop bodies once per iteration of their
    static trip count) and once (each body once, as XLA's cost analysis counts);
    ``matmul`` is the part of ``per_step`` in dots and convolutions by element
    type of their result (what a matrix unit runs)."""

    per_step: float
    once: float
    matmul: dict[str, float]


def module_flops(reader: ModuleValues, memo: dict | None = None,
                 keys: list[tuple | None] | None = None) -> Flops:
    """Per-device operations of every public function of ``reader``'s module's
    entry (``main``, else every public function).

    ``memo``: kept by the caller across the propagated copies of one module (with
    ``reader.costs``): a dot's or an elementwise op's count by its ``op_key`` (its
    rule, types and interned shardings: all its count reads, with the fusions it is
    copied into), so an op situated as one already counted, in a repeated layer or in
    an earlier copy, is looked up; ``keys``: every op's ``op_key``, where the caller
    has them."""
    counter = _Counter(reader, memo if reader.costs is not None else None, keys)
    graph = reader.graph
    entries = [op for name, op in reader.funcs.items() if name == "main"] or [
        op for op in reader.funcs.values() if not _private(graph.ops[op])]
    per_step = once = 0.0
    for func in entries:
        step, one = counter.region(graph.op_blocks[func])
        per_step += step
        once += one
    return Flops(per_step, once, dict(counter.matmul))


class _Counter:
    def __init__(self, reader: ModuleValues, memo: dict | None = None,
                 keys: list[tuple | None] | None = None) -> None:
        self.reader = reader
        self.memo = memo
        self.keys = keys
        self.graph = reader.graph
        self.matmul: dict[str, float] = {}
        self._calls: dict[int, tuple[float, float]] = {}
        self._scale = 1.0  # how many times the op being counted runs per step
        self._used: set[str] = set()  # the mesh axes of the dot being counted's result
        # ``_fusion_roots``, per op: the graph's alone (no sharding changes them), kept with
        # the facts the readers of one shared read share.
        self._roots: dict[int, frozenset[int]] = reader.facts.setdefault("fusion roots", {})

    def region(self, blocks: Iterable[tuple[list[int], list[int]]]) -> tuple[float, float]:
        """(per step, once) of the ops of ``blocks``."""
        step = once = 0.0
        for _, ops in blocks:
            for op in ops:
                s, o = self.op(op)
                step += s
                once += o
        return step, once

    def op(self, op: int) -> tuple[float, float]:
        graph = self.graph
        name = graph.op_name[op]
        if name == "stablehlo.while":
            trips = trip_count(graph, op)
            outer = self._scale
            self._scale = outer * (trips if trips is not None else 1)
            step, once = self.region(graph.op_blocks[op])
            self._scale = outer
            return step * (trips if trips is not None else 1), once
        if name in ("stablehlo.case", "stablehlo.if"):
            branches = [self.region([block]) for block in graph.op_blocks[op]]
            return max((b[0] for b in branches), default=0.0), max(
                (b[1] for b in branches), default=0.0)
        if name == "func.call":
            return self._call(op)
        if name in _BODY_OPS:
            n = self._applied(op) * self._body(op)
            return n, n
        if graph.op_blocks[op] and name not in ("stablehlo.sort",):
            return self.region(graph.op_blocks[op])  # manual / named computations
        n = self._leaf(op, name) if self.memo is None or name not in _KEYED else (
            self._keyed_leaf(op, name))
        return n, n

    def _keyed_leaf(self, op: int, name: str) -> float:
        """``_leaf`` looked up in ``memo`` by the op's key (counted where new)."""
        key = self.keys[op] if self.keys is not None else self.reader.op_key(op)
        if key is None:
            return self._leaf(op, name)
        if name in ELEMENTWISE and name not in _EXPENSIVE:
            key = (key, len(self._fusion_roots(op)))
        n = self.memo.get(key)
        if n is None:
            n = self.memo[key] = self._leaf(op, name)  # a dot's part of ``matmul`` added
        elif name == "stablehlo.dot_general":
            self._matmul(op, n)
        return n

    def _fusion_roots(self, op: int) -> frozenset[int]:
        """The fusions XLA copies op ``op`` into, each named by its last op. XLA's
        fusion copies a cheap producer into every consumer fusion when all its
        users can fuse it (elementwise and data-movement ops, reductions), and
        its cost analysis counts each copy; a producer read by an op that fuses
        nothing (a dot, a collective, a return...) is computed once."""
        known = self._roots.get(op)
        if known is not None:
            return known
        graph = self.graph
        stack, reached = [op], {op}
        while stack:  # every op reached through fusible users (iteratively: chains are long)
            for value in graph.op_results[stack.pop()]:
                for user, _ in graph.uses[value]:
                    if user not in reached and user not in self._roots and self._fuses(user):
                        reached.add(user)
                        stack.append(user)
        # users before their producers: an op's users come after it in the graph's
        # pre-order (in its block, or in the regions of ops after it)
        for top in sorted(reached, reverse=True):
            users = [user for value in graph.op_results[top] for user, _ in graph.uses[value]]
            roots: set[int] = set()
            for user in users:
                if self._fuses(user) and user in self._roots:
                    roots |= self._roots[user]
                elif graph.op_name[user] in _BODY_OPS:
                    roots.add(user)  # a reduction fuses its producers
                else:  # read by an op that fuses nothing: computed once, materialised
                    roots = {top}
                    break
            if graph.op_name[top] in _EXPENSIVE and len(roots) > 1:
                roots = {top}  # never copied
            self._roots[top] = frozenset(roots or {top})
        return self._roots[op]

    def _fuses(self, op: int) -> bool:
        name = self.graph.op_name[op]
        return name in _THROUGH or name in ELEMENTWISE or name in TRANSCENDENTAL

    def _call(self, op: int) -> tuple[float, float]:
        callee = ir.FlatSymbolRefAttr(self.graph.ops[op].attributes["callee"]).value
        func = self.reader.funcs.get(callee)
        if func is None:
            return 0.0, 0.0
        if func not in self._calls:
            self._calls[func] = self.region(self.graph.op_blocks[func])
        return self._calls[func]

    def _shard(self, value: int) -> list[int] | None:
        tensor = self.reader.tensor(value)
        if tensor is None:
            return None
        return shard_shape(tensor.shape, dim_axes(tensor.sharding, len(tensor.shape)))

    def _elements(self, value: int) -> int:
        shape = self._shard(value)
        return prod(shape) if shape is not None else 0

    def _leaf(self, op: int, name: str) -> float:
        graph = self.graph
        results = graph.op_results[op]
        if name in ELEMENTWISE:
            copies = 1 if name in _EXPENSIVE else max(len(self._fusion_roots(op)), 1)
            return float(copies * sum(self._elements(v) for v in results))
        if name == "stablehlo.dot_general":
            return self._matmul(op, self._dot(op))
        if name == "stablehlo.convolution":
            return self._matmul(op, self._convolution(op))
        if name == "stablehlo.sort":
            n = self._elements(graph.op_operands[op][0])
            return float(n * ceil(log2(n))) if n > 1 else 0.0
        if name == "stablehlo.fft":
            lengths = [int(x) for x in ir.DenseI64ArrayAttr(graph.ops[op].attributes["fft_length"])]
            factors = prod(int(log2(n)) for n in lengths if n > 0)
            return float(_FMA * 4 * factors * self._elements(graph.op_operands[op][0]))
        if name == "stablehlo.triangular_solve":
            a = self._shard(graph.op_operands[op][0])
            return float(_FMA * a[-1] * self._elements(graph.op_operands[op][1])) if a else 0.0
        if name == "stablehlo.cholesky":
            a = self._shard(graph.op_operands[op][0])
            return float(a[-1] * prod(a) // 3) if a else 0.0
        return 0.0

    def _matmul(self, op: int, n: float) -> float:
        tensor = self.reader.tensor(self.graph.op_results[op][0])
        dtype = tensor.dtype if tensor is not None and tensor.dtype else "f32"
        self.matmul[dtype] = self.matmul.get(dtype, 0.0) + n * self._scale
        return n

    def _result_axes(self, op: int) -> set[str]:
        tensor = self.reader.tensor(self.graph.op_results[op][0])
        if tensor is None or tensor.sharding is None:
            return set()
        return {axis.name for dim in tensor.sharding.dims for axis in dim.axes}

    def _split(self, size: int, *dims) -> int:
        """The length on one device of a dimension ``size`` long that the operands
        shard as ``dims`` (each a tuple of axes): XLA slices the less sharded operand
        to the more sharded one's split, over axes the result does not use."""
        best = 1
        for axes in dims:
            best = max(best, size_product([a for a in axes if a.name not in self._used]))
        return -(-size // best)

    def _operand_dims(self, value: int) -> list[tuple]:
        tensor = self.reader.tensor(value)
        rank = len(tensor.shape) if tensor is not None else 0
        return dim_axes(tensor.sharding if tensor is not None else None, rank)

    def _dot(self, op: int) -> float:
        graph = self.graph
        lhs, rhs = graph.op_operands[op][:2]
        dims = stablehlo.DotDimensionNumbers(graph.ops[op].attributes["dot_dimension_numbers"])
        lhs_t = self.reader.tensor(lhs)
        if lhs_t is None:
            return 0.0
        self._used = self._result_axes(op)
        lhs_axes, rhs_axes = self._operand_dims(lhs), self._operand_dims(rhs)
        width = 1
        for l_dim, r_dim in zip(dims.lhs_contracting_dimensions, dims.rhs_contracting_dimensions):
            width *= self._split(lhs_t.shape[l_dim], lhs_axes[l_dim], rhs_axes[r_dim])
        return float(_FMA * self._elements(graph.op_results[op][0]) * width)

    def _convolution(self, op: int) -> float:
        graph = self.graph
        ir_op = graph.ops[op]
        lhs, rhs = graph.op_operands[op][:2]
        result = graph.op_results[op][0]
        lhs_t, rhs_t = self.reader.tensor(lhs), self.reader.tensor(rhs)
        out = self._shard(result)
        if lhs_t is None or rhs_t is None or out is None:
            return 0.0
        self._used = self._result_axes(op)
        dims = stablehlo.ConvDimensionNumbers(ir_op.attributes["dimension_numbers"])
        lhs_axes, rhs_axes = self._operand_dims(lhs), self._operand_dims(rhs)
        local_in = shard_shape(lhs_t.shape, lhs_axes)
        feature = self._split(lhs_t.shape[dims.input_feature_dimension],
                              lhs_axes[dims.input_feature_dimension],
                              rhs_axes[dims.kernel_input_feature_dimension])
        groups = _int_attr(ir_op, "feature_group_count", 1)
        spatial = len(dims.input_spatial_dimensions)
        strides = _ints(ir_op, "window_strides", [1] * spatial)
        lhs_dilation = _ints(ir_op, "lhs_dilation", [1] * spatial)
        rhs_dilation = _ints(ir_op, "rhs_dilation", [1] * spatial)
        padding = _padding(ir_op, spatial)
        positions = 1
        for k in range(spatial):
            positions *= _valid_positions(
                local_in[dims.input_spatial_dimensions[k]],
                rhs_t.shape[dims.kernel_spatial_dimensions[k]],
                out[dims.output_spatial_dimensions[k]],
                strides[k], padding[k][0], lhs_dilation[k], rhs_dilation[k])
        # batch / batch groups is the result's batch: read it there, where the device's
        # part is the one it computes (the input may be split otherwise)
        fma = (feature // groups) * out[dims.output_feature_dimension] \
            * out[dims.output_batch_dimension] * positions
        batch_groups = _int_attr(ir_op, "batch_group_count", 1)
        if batch_groups > 1 and active_rules().expands_batch_group_convolutions:
            # Computed dense, every group against every other: the device's groups, those
            # of its part of the output features (the partitioner splits them so).
            feature_dim = dims.output_feature_dimension
            whole = graph.value_shape[result][feature_dim]
            fma *= max(batch_groups * out[feature_dim] // whole, 1)
        return float(_FMA * fma)

    def _applied(self, op: int) -> int:
        """How many times ``op``'s body runs on one device."""
        graph = self.graph
        name = graph.op_name[op]
        operands, results = graph.op_operands[op], graph.op_results[op]
        if name == "stablehlo.reduce":
            return max(self._elements(operands[0]) - self._elements(results[0]), 0)
        if name == "stablehlo.reduce_window":
            window = _ints(graph.ops[op], "window_dimensions", [])
            return (prod(window) - 1) * self._elements(results[0])
        if name == "stablehlo.scatter":
            inputs = (len(operands) - 1) // 2
            return self._elements(operands[inputs + 1])
        if name == "stablehlo.select_and_scatter":
            return self._elements(operands[1])  # the scatter side; the select's is below
        return self._elements(results[0])  # map: per result element

    def _body(self, op: int) -> float:
        """Operations of one application of ``op``'s scalar body (the first region;
        select_and_scatter: its select per window element, then its scatter)."""
        graph = self.graph
        blocks = graph.op_blocks[op]
        counts = [sum(1.0 for o in ops if graph.op_name[o] in ELEMENTWISE)
                  for _, ops in blocks]
        if graph.op_name[op] == "stablehlo.select_and_scatter":
            window = _ints(graph.ops[op], "window_dimensions", [])
            return counts[0] * (prod(window) - 1) + (counts[1] if len(counts) > 1 else 0.0)
        return counts[0]


def _private(func: ir.Operation) -> bool:
    attributes = func.attributes
    return ("sym_visibility" in attributes
            and ir.StringAttr(attributes["sym_visibility"]).value == "private")


def _int_attr(op: ir.Operation, name: str, default: int) -> int:
    return int(ir.IntegerAttr(op.attributes[name]).value) if name in op.attributes else default


def _ints(op: ir.Operation, name: str, default: list[int]) -> list[int]:
    if name not in op.attributes:
        return default
    return [int(x) for x in ir.DenseI64ArrayAttr(op.attributes[name])]


def _padding(op: ir.Operation, spatial: int) -> list[tuple[int, int]]:
    if "padding" not in op.attributes:
        return [(0, 0)] * spatial
    flat = [int(x) for x in ir.DenseIntElementsAttr(op.attributes["padding"])]
    return [(flat[2 * k], flat[2 * k + 1]) for k in range(spatial)]


def _valid_positions(inputs: int, kernel: int, outputs: int, stride: int, pad_low: int,
                     base_dilation: int, window_dilation: int) -> int:
    """(output, kernel) position pairs of one spatial dimension whose input index
    falls on an input element (not padding, not a hole of the base dilation)."""
    count = 0
    for k in range(kernel):
        if stride == 1 and base_dilation == 1:
            base = pad_low - k * window_dilation
            count += max(min(inputs + base, outputs) - max(base, 0), 0)
            continue
        for o in range(outputs):
            undilated = o * stride - pad_low + k * window_dilation
            if undilated % base_dilation:
                continue
            index = undilated // base_dilation
            if 0 <= index < inputs:
                count += 1
    return count


__all__ = ["ELEMENTWISE", "TRANSCENDENTAL", "Flops", "module_flops"]
