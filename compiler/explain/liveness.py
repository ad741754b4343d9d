"""The liveness walk behind the memory estimate: which values XLA materialises, where.

``LivenessWalker.peak`` walks a block of a propagated module in program order
and records one ``Interval`` per buffer (its first and last live position and
per-device bytes): values XLA never materialises (constants, fusible ops read
only by fusing consumers) are skipped, in-place results share their operand's
buffer, reshards and XLA:CPU's transposed operand copies (``needs``) add
buffers, independent all-reduces over the same axes are combined, ops that
read no buffer the block computes are scheduled first, and nested bodies
add their own peak while their op runs.
``memory`` turns the intervals into the estimate; its docstring lists the
rules and the buffer assignments they were read from.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from math import prod

from jaxlib.mlir import ir

from shardc.compiler.cost.fusion import CHLO_ELEMENTWISE, FUSIBLE, FUSING_CONSUMERS
from shardc.compiler.cost.fusion import FREE as _FREE
from shardc.compiler.cost.platforms import active_rules
from shardc.compiler.diagnostics import source_loc_of
from shardc.compiler.explain.aliasing import Slot
from shardc.compiler.explain.duplication import CodeCopies, cheap_to_duplicate, expensive
from shardc.compiler.explain.grid import shard_shape
from shardc.compiler.explain.hoisted import (
    batching_dims,
    hoisted_graph,
    index_vector_dim,
    indices_operand,
    invariant_indices,
)
from shardc.compiler.explain.merged import merged_graph
from shardc.compiler.explain.needs import CONSTANTS as _CONSTANTS
from shardc.compiler.explain.needs import OpNeeds
from shardc.compiler.explain.on_chip import split_peak
from shardc.compiler.explain.simplified import simplified_graph
from shardc.compiler.explain.tables import TupleTables
from shardc.compiler.propagation.graph import ELEMENTWISE
from shardc.compiler.propagation.values import ModuleValues
from shardc.compiler.stages.hlo_order import jax_ordered

# ops whose result k XLA writes into the buffer of one operand when that dies there
# (its dataflow lets a sort write over the operand it alone reads)
_IN_PLACE = {"stablehlo.while": lambda k: k, "stablehlo.dynamic_update_slice": lambda k: 0,
             "stablehlo.scatter": lambda k: k, "stablehlo.sort": lambda k: k}
# ops XLA's constant folding folds with constant operands, beside elementwise ones
_FOLDED_SHAPES = frozenset({"stablehlo.reshape", "stablehlo.convert",
                            "stablehlo.broadcast_in_dim"})
# ops whose regions compute one element (or pair) at a time, not the op's results
_PER_ELEMENT_BODIES = frozenset("stablehlo." + n for n in (
    "reduce", "reduce_window", "sort", "scatter", "select_and_scatter", "all_reduce",
    "reduce_scatter", "map"))
# ops whose results the enclosing block counts while their regions run
_WRITING_OWN_RESULTS = _PER_ELEMENT_BODIES | {"stablehlo.while", "stablehlo.case"}
_PASS_ON = frozenset({"sdy.data_flow_edge", "sdy.sharding_constraint", "sdy.reshard",
                      "sdy.propagation_barrier"})
_BARRIER = "stablehlo.optimization_barrier"
_BROADCAST = "stablehlo.broadcast_in_dim"
# The readers a duplicated producer's buffer is kept for (``duplicated``): ops that
# fuse no producer. A dot on XLA:CPU is a YNNPACK fusion of its own that reads such
# a value whole (the zoo LMs keep it); a loop copies its initial value into its
# carry (flax nnx's scanned carries' zero broadcasts, ``wrapped_broadcast.1`` copied
# into both loops' carries while the optimizer's adds fuse a broadcast of their own).
_KEPT_FOR = frozenset({"stablehlo.convolution", "stablehlo.while"})
_COLLECTIVE = "collective"  # a reader standing for a reshard that moves data
_CONSTRAINT = "sdy.sharding_constraint"
# the ops whose all-reduced partial sums XLA's reassociation adds before reducing: dots,
# and the sums it has reassociated already
_SUMMED = frozenset({"stablehlo.dot_general", "stablehlo.add"})
# fusible ops XLA never duplicates into several readers: a gather (fusible on XLA:CPU)
# is expensive to its ``InstructionFusion::IsExpensive``, so one read by several
# kernels is a buffer (e3nn's message gradient, a gather of a broadcast read by four
# fusions: broadcast_gather_fusion)
_EXPENSIVE = frozenset("stablehlo." + n for n in (
    "exponential", "exponential_minus_one", "log", "log_plus_one", "logistic", "power",
    "rsqrt", "sqrt", "cbrt", "sine", "cosine", "tan", "tanh", "atan2", "gather")) | frozenset(
    {"chlo.erf", "chlo.erf_inv", "chlo.tan", "chlo.lgamma", "chlo.digamma"})
# A returned value fuses into its output buffer (counted as an output, not a temporary).
# XLA:CPU fuses elementwise producers into a dynamic-update-slice too (pipeline_shard_map:
# select_dynamic-update-slice_fusion, dynamic-update-slice_add_fusion in its loop bodies).
_FUSING_CONSUMERS = FUSING_CONSUMERS | frozenset({"func.return",
                                                  "stablehlo.dynamic_update_slice"})

# ops a fused kernel computes element by element (one output element from the same
# element of each operand)
ELEMENTWISE_OPS = ELEMENTWISE | CHLO_ELEMENTWISE

# A block's positions: op k of the block at ``STEP * k``, and the moment after it at
# ``STEP * k + 1``, where XLA runs the all-reduce of the op's partial sums as an op of
# its own: the op's dying operands are freed by then and the next op's result is not
# written yet (jaxtyping_mlp: all-reduce.2 between ynn_fusion.2 and the transposed
# copy of its result, copy_bitcast_fusion.1, the three 4 KiB buffers never live at once).
STEP = 2
# The most all-reduces XLA:CPU's combiner puts in one (``kCombineCount``).
_COMBINED_OPERANDS = 256


# XLA:CPU offloads an f32 reduction with one of these bodies to YNNPACK from
# ``PlatformRules.offloaded_reduction_elements`` input elements on.
_YNN_REDUCERS = frozenset({"stablehlo.add", "stablehlo.maximum", "stablehlo.minimum"})
# The ops such a reduction's fusion takes in with it (XLA's ``ynn_support``: its unary
# and binary operators, broadcasts, bitcasts and reshapes, transposes, slices, pads,
# concatenates, iotas). A fusible producer outside it (a dynamic-slice, a reverse, a
# select or compare) is a loop fusion of its own that writes a buffer the reduction
# reads: a scanned backward's slices of the saved stacks feeding the RMS norm's weight
# gradient (``subtract_dynamic-slice_fusion`` read by ``ynn_fusion.20``).
_YNN_FUSED = frozenset("stablehlo." + n for n in (
    "abs", "ceil", "convert", "cosine", "exponential", "exponential_minus_one", "floor",
    "log", "log_plus_one", "logistic", "negate", "round_nearest_even", "rsqrt", "sign",
    "sine", "sqrt", "tanh", "tan", "add", "divide", "maximum", "minimum", "multiply",
    "power", "subtract", "broadcast_in_dim", "reshape", "transpose", "slice", "pad",
    "concatenate", "iota")) | frozenset({"chlo.erf", "chlo.tan"}) | _FREE


@dataclass(frozen=True)
class Buffer:
    """One temporary buffer of the estimate."""

    name: str
    op: str
    loc: str | None
    bytes_per_device: int


@dataclass(frozen=True)
class Allocation:
    """A temporary buffer as the walk finds it: the value and op, described (named and
    located, which prints the op's location) only if the estimate lists it."""

    value: int
    op: int
    bytes_per_device: int


@dataclass
class Interval:
    """A buffer's live positions (inclusive; ``STEP`` per op) in the main function's
    op list."""

    start: int
    end: int
    size: int
    buffer: Allocation | None
    fits_output: bool = True  # one value, so XLA may place it in an output buffer
    # the values the buffer holds in turn (its own, then results written in place)
    holders: list[int] = field(default_factory=list)
    # on-chip bytes a nested body holds while the op runs (``on_chip``)
    on_chip: int = 0
    moved: bool = False  # a collective's result (a gathered operand)
    # a loop body's buffer, live while the loop at ``start`` runs: where in the body
    # (``order``'s keys of the body's own interval)
    within: tuple | None = None
    # the buffer of a dying operand this one is written over, where both go to the
    # heap (``LivenessWalker.elementwise_sources``)
    over: Interval | None = None

    def order(self) -> tuple[tuple, tuple]:
        """Keys ordering the interval's first and last live moments in the program as
        XLA flattens it, a loop body's ops in the loop's place: a buffer of the block
        is live from before the body's first op at its start to after the body's last
        at its end."""
        if self.within is not None:
            first, last = self.within
            return (self.start, *first), (self.end, *last)
        return (self.start, -1), (self.end, _AFTER)


_AFTER = 1 << 62  # after every op of a loop body run at the same position


class LivenessWalker:
    def __init__(self, values: ModuleValues) -> None:
        self.values = values
        self.rules = active_rules()  # the platform's buffer layout
        # Propagation may have read the blocks in XLA's order (``hlo_order``); buffers
        # live in the program's own order, as XLA schedules them.
        graph = jax_ordered(values.graph)
        if self.rules.expands_optimization_barriers:
            graph = merged_graph(graph)  # jax.checkpoint's recomputation merged (CSE)
        found = OpNeeds.collect(values)
        # outer products read as multiplies, selects of one value merged into it,
        # loop-invariant ops before their loops
        self.graph = hoisted_graph(simplified_graph(graph), found.reduced)
        # ops merged into an earlier value: they write no buffer
        self.merged_ops: set[int] = getattr(self.graph, "merged_ops", set())
        self.merged: dict[int, int] = getattr(self.graph, "merged", {})
        # The mesh the program's tensors are split over: the one with the most devices.
        # The first one declared may be an empty mesh (jax writes one for a replicated
        # value), and read as the program's it counted every buffer whole.
        mesh = max(values.meshes.values(), key=lambda m: prod(m.sizes.values()), default=None)
        self.sizes = dict(mesh.sizes) if mesh is not None else {}
        self.extra, self.needs, self.reduced = found.extra, found.needs, found.reduced
        self.partial, self.whole, self.moved = found.partial, found.whole, found.moved
        self.scattered, self.relaid = found.scattered, found.relaid
        self.converted, self.widened = found.converted, found.widened
        self.exchanged = found.exchanged
        self.windowed = found.windowed
        for op, body in found.bodies.items():
            # a custom_partitioning op's inlined body runs in its place
            self.extra[op] = self.extra.get(op, 0) + self.body_bytes(body)
        # a batched gather's loop-invariant indices, concatenated with their iotas
        # before the loop and carried through it (``hoisted``)
        self.hoisted_indices = invariant_indices(self.graph)
        for op, loop in self.hoisted_indices.items():
            self.extra[loop] = self.extra.get(loop, 0) + self.concatenated_bytes(op)
        if self.rules.reassociates_all_reduces:
            self.reduced = self.reassociated(self.reduced)
        self.block_args: dict[int, list[int]] = {}  # first op of a block -> its arguments
        for op in range(len(graph.ops)):
            for block_args, block_ops in self.graph.op_blocks[op]:
                if block_ops:
                    self.block_args[block_ops[0]] = block_args
        self.buffers: list[Allocation] = []
        # the tables of pointers of tuple-shaped values (``tables``), by value
        self.tables: dict[tuple, int] = {}
        self.tuple_tables = TupleTables(self)
        # a batched scatter's indices left in place: XLA's normalizer concatenates them
        # with their batch iotas into an array of their own, which no scatter fuses
        for op, name in enumerate(self.graph.op_name):
            if name == "stablehlo.scatter" and op not in self.hoisted_indices \
                    and op not in self.merged_ops and batching_dims(self.graph, op):
                self.extra[op] = self.extra.get(op, 0) + self.joined_bytes(op)
        # results of the main function written into donated arguments' buffers
        self.aliased_outputs: set[int] = set()
        self.state = ir.AsmState(values.graph.module)
        self._duplicated: dict[int, bool] = {}  # ``duplicated``'s answers
        self._in_dots: dict[int, bool] = {}  # ``fused_into_dots``'s answers
        # how often the kernels fusing a value would emit its code (``duplication``)
        self.code_copies = CodeCopies(self)

    def body_bytes(self, body: bytes) -> int:
        """The peak of a ``custom_partitioning`` op's per-device body (MLIR bytecode)
        but its arguments and results (the op's operands, as the body takes them, and
        its results), walked as a program of its own."""
        with self.values.graph.module.context:
            module = ir.Module.parse(body)
        values = ModuleValues(module.operation, missing_as_replicated=True)
        funcs = values.funcs
        main = funcs.get("main", next(iter(funcs.values()), -1))
        if main < 0 or not values.graph.op_blocks[main]:
            return 0
        ops = values.graph.op_blocks[main][0][1]
        walker = LivenessWalker(values)
        return walker.peak(ops, walker.yielded(ops))[0]

    def reassociated(self, reduced: dict[int, tuple]) -> dict[int, tuple]:
        """The ops whose results are all-reduced once XLA reassociates
        ``add(all-reduce(a), all-reduce(b))`` over the same axes into
        ``all-reduce(add(a, b))`` (``report``'s collectives fold the same way): the
        sum, not the dots. Each dot's partial sums are a buffer the add reads and one
        all-reduce writes the sum's: a scanned 7b layer's input gradient through Q, K
        and V on v5e 16x16 holds three partial sums and one all-reduced buffer in
        XLA:TPU's backward loop, not three of each, combined."""
        graph = self.graph
        out = dict(reduced)
        for op, name in enumerate(graph.op_name):
            if name != "stablehlo.add" or len(graph.op_operands[op]) != 2:
                continue
            owners = [self._unconstrained(v) for v in graph.op_operands[op]]
            if owners[0] == owners[1] or any(
                    o < 0 or o not in out or graph.op_name[o] not in _SUMMED for o in owners):
                continue
            sizes = {self.reduced_bytes(graph.op_results[o][0]) for o in owners}
            if out[owners[0]] != out[owners[1]] or len(sizes) != 1:
                continue
            out[op] = out.pop(owners[0])
            del out[owners[1]]
        return out

    def _unconstrained(self, value: int) -> int:
        """The op defining ``value`` through sharding constraints that move nothing."""
        graph = self.graph
        op = graph.value_def[value]
        while op >= 0 and graph.op_name[op] == _CONSTRAINT and not self.needs.get(op):
            op = graph.value_def[graph.op_operands[op][0]]
        return op

    def described(self, allocation: Allocation) -> Buffer:
        """The buffer of ``allocation`` with its value's name and its op's source line."""
        graph = self.graph
        return Buffer(graph.values[allocation.value].get_name(self.state),
                      graph.op_name[allocation.op], loc_text(graph.ops[allocation.op]),
                      allocation.bytes_per_device)

    def bytes_of(self, value: int) -> int:
        return self.slot(value).bytes_per_device

    def concatenated_bytes(self, op: int) -> int:
        """Per-device bytes of batched gather or scatter ``op``'s indices as XLA's
        normalizer writes them: each index vector led by one iota per batching
        dimension, in an integer type wide enough for that dimension's size."""
        graph = self.graph
        value = graph.op_operands[op][indices_operand(graph, op)]
        shape = graph.value_shape[value]
        if shape is None:
            return 0
        tensor = self.values.tensor(value)
        shard = list(shard_shape(shape, tensor.sharding) if self.sizes else shape)
        batched = batching_dims(graph, op)
        element = tensor.element_bytes
        if any(shard[d] >= 1 << (8 * element - 1) for d in batched):
            element = 4 if all(shard[d] < 1 << 31 for d in batched) else 8
        vector = index_vector_dim(graph, op)
        if vector == len(shard):
            shard.append(1)
        shard[vector] += len(batched)
        return self.rules.buffer_bytes(shard, element)

    def joined_bytes(self, op: int) -> int:
        """Per-device bytes batched scatter ``op`` reads beyond what the walk holds:
        its indices concatenated with their batch iotas (``concatenated_bytes``), a
        kernel of its own on XLA:CPU (a scatter fuses no producer: mctx's
        ``iota_concatenate_fusion``, s32[2,3], per search step). Indices XLA folds to a
        constant join into a constant; indices an op computes for batched scatters
        alone die in the concatenate (computed in it where the op is fusible: the
        joined array is all the walk adds beyond them; a sort's permutation read by
        embedding_heads' scatter-add, u32[256,3]). Split indices are each device's
        slice (the partitioner's, at its partition-id): never a constant."""
        graph = self.graph
        value = graph.op_operands[op][indices_operand(graph, op)]
        constant = self.folds(value, {})
        if constant and self.unsplit(value) and self._folded_at_top(value, {}):
            return 0
        joined = self.concatenated_bytes(op)
        source = self.root(value)
        owner = graph.value_def[source]
        while owner >= 0 and graph.op_name[owner] == "stablehlo.reshape" and \
                len(graph.uses[source]) == 1:
            source = self.root(graph.op_operands[owner][0])
            owner = graph.value_def[source]
        # (constant indices left whole are a broadcast of a folded constant, XLA's
        # simplifier sinking the broadcast: a buffer of its own beside the joined
        # ones, a table broadcast to the batch in XLA:CPU's temporaries)
        if not constant and owner >= 0 and all(
                self._batched_scatter_reads(user, source) for user, _ in graph.uses[source]):
            # the heap holds each at its alignment
            return max(self.aligned(joined) - self.aligned(self.bytes_of(source)), 0)
        return joined

    def _batched_scatter_reads(self, user: int, value: int) -> bool:
        """Whether ``user`` reads ``value`` only as a batched scatter's indices, or
        reshapes it for those alone."""
        graph = self.graph
        name = graph.op_name[user]
        if name == "stablehlo.reshape":
            result = graph.op_results[user][0]
            return all(self._batched_scatter_reads(u, result) for u, _ in graph.uses[result])
        return name == "stablehlo.scatter" and bool(batching_dims(graph, user)) and \
            graph.op_operands[user][indices_operand(graph, user)] == value and \
            graph.op_operands[user].count(value) == 1

    def folds(self, value: int, memo: dict[int, bool], depth: int = 0) -> bool:
        """Whether XLA's constant folding makes ``value`` a constant: a constant (a
        loop's carry as ``TupleTables.constant`` finds it), an iota whole on each
        device, or a broadcast, reshape, convert or elementwise op of constants
        (``_folded_at_top``: which XLA writes as one). A split iota counts from its
        device's offset (the partitioner's partition-id): no constant."""
        value = self.root(value)
        if value in memo:
            return memo[value]
        memo[value] = False
        graph = self.graph
        owner = graph.value_def[value]
        if owner < 0:
            memo[value] = self.tuple_tables.constant(value)  # a loop's constant carry
        elif depth < 16:
            name = graph.op_name[owner]
            memo[value] = name in _CONSTANTS - {"stablehlo.iota"} or (
                name == "stablehlo.iota" and self.unsplit(value)) or (
                (name in ELEMENTWISE_OPS or name in _FOLDED_SHAPES) and
                bool(graph.op_operands[owner]) and
                all(self.folds(v, memo, depth + 1) for v in graph.op_operands[owner]))
        return memo[value]

    def _folded_at_top(self, value: int, memo: dict[int, bool], depth: int = 0) -> bool:
        """Whether XLA's constant folding writes constant ``value`` as a constant: it
        folds an op reading constants, evaluating the broadcasts and iotas it reads,
        but no broadcast or iota itself (it would grow the constant), nor a bitcast of
        one, nor an elementwise op of broadcasts (its simplifier sinks the broadcast
        below the op first)."""
        graph = self.graph
        value = self.root(value)
        owner = graph.value_def[value]
        if owner < 0 or depth > 16:
            return True
        if value in memo:  # a chain reading one value twice is walked once
            return memo[value]
        name = graph.op_name[owner]
        operands = graph.op_operands[owner]
        found = True
        if name in ("stablehlo.broadcast_in_dim", "stablehlo.reshape") and \
                prod(graph.value_shape[operands[0]] or (0,)) == prod(graph.value_shape[value] or (0,)):
            found = self._folded_at_top(operands[0], memo, depth + 1)  # a bitcast
        elif name in ("stablehlo.broadcast_in_dim", "stablehlo.iota"):
            found = False
        elif name in ELEMENTWISE_OPS and operands:
            found = any(self._folded_at_top(v, memo, depth + 1) for v in operands)
        memo[value] = found
        return found

    def unsplit(self, value: int) -> bool:
        """Whether each device holds all of ``value``."""
        return list(self.slot(value).key[0]) == list(self.graph.value_shape[value])

    def slot(self, value: int, sharding=None) -> Slot:
        """Per-device bytes and type of ``value`` (at ``sharding`` if given, else its own)."""
        shape = self.graph.value_shape[value]
        if shape is None:
            return Slot(0, ())
        tensor = self.values.tensor(value)
        sharding = sharding if sharding is not None else tensor.sharding
        shard = shard_shape(shape, sharding) if self.sizes else shape
        total = self.rules.buffer_bytes(shard, tensor.element_bytes)
        element = ir.ShapedType(self.graph.values[value].type).element_type
        return Slot(total, (tuple(shard), str(element)))

    def one_output(self, value: int, op: int) -> bool:
        """Whether ``value`` is read by one chain of fusible ops, each read once and
        each keeping its number of elements, that ends in the block's return (it
        writes a single output of its size, not one aliased with a donated argument).
        A chain that pads or concatenates it
        into a larger output (a stacked layer's gradient) writes that output from
        several such values at once: each stays a buffer of its own."""
        graph = self.graph
        shape = graph.value_shape[value]
        elements = prod(shape) if shape is not None else -1
        for _ in range(64):
            readers = {self.top_user(u, op) for u, _ in graph.uses[value]}
            if len(readers) != 1:
                return False
            op = next(iter(readers))
            if graph.op_name[op] == "stablehlo.return":
                return True
            if graph.op_name[op] == "func.return":
                # a donated argument's buffer holds an aliased output: not free before
                return graph.op_operands[op].index(value) not in self.aliased_outputs
            results = graph.op_results[op]
            if graph.op_name[op] not in FUSIBLE or len(results) != 1:
                return False
            value = results[0]
            shape = graph.value_shape[value]
            if shape is None or prod(shape) != elements:
                return False
        return False

    def read_in_place(self, value: int) -> set[int]:
        """The buffers the kernel writing ``value`` may write it over: the values it
        reads elementwise, each of ``value``'s per-device shape and type, through
        the elementwise ops fused into it.

        XLA lets a loop fusion's result share an operand's buffer when the fused
        computation reads that operand only elementwise and both have one shape
        (``CanShareOperandBufferWithUser``): the operand dying there is then
        overwritten. Seen writing outputs: an optimizer's update
        (multiply_add_fusion.4 of eqx_batchnorm_state) takes the all-reduced
        gradient's allocation, and a scanned gradient accumulator (the while
        loop's carry) is the allocation its ``w - lr * g`` output is written to
        (multiply_subtract_fusion of jax_host_callback_scan). A scatter or a
        dynamic-update-slice writes over the operand it updates.
        """
        graph = self.graph
        key = self.slot(value).key
        found: set[int] = set()
        owner = graph.value_def[self.root(value)]
        if owner in self.reduced:
            return found  # the all-reduce of its partial sums writes it, apart
        if owner >= 0 and graph.op_name[owner] in ("stablehlo.dynamic_update_slice",
                                                   "stablehlo.scatter"):
            # an in-place update writes over the operand it updates
            found.add(self.root(graph.op_operands[owner][0]))
        if owner >= 0 and graph.op_name[owner] == "stablehlo.while":
            # a loop's result is its carry, updated in place over the carry's initial
            # value: a scanned backward's zero gradient stack (``wrapped_broadcast.1``
            # of a rematerialised scan's bf16 weight gradients) is written in the
            # output's allocation and accumulated there
            k = graph.op_results[owner].index(self.root(value))
            found.add(self.root(graph.op_operands[owner][k]))
        stack, seen = [self.root(value)], set()
        while stack:
            current = stack.pop()
            owner = graph.value_def[current]
            if current in seen or owner < 0 or graph.op_name[owner] not in ELEMENTWISE_OPS:
                continue
            seen.add(current)
            for operand in graph.op_operands[owner]:
                operand = self.root(operand)
                if self.slot(operand).key != key:
                    continue
                found.add(operand)
                source = graph.value_def[operand]
                if source >= 0 and not self.materialised(operand, source):
                    stack.append(operand)
        return found

    def aligned(self, size: int) -> int:
        """``size`` as the platform's heap holds a buffer of it: rounded up to the
        alignment of offsets in the heap (XLA:CPU: 64 bytes; diffrax_neural_ode's
        loop keeps hundreds of buffers of a few floats)."""
        alignment = self.rules.heap_alignment
        return -(-size // alignment) * alignment

    def reduced_bytes(self, value: int) -> int:
        """Bytes of the buffer an op writes ``value`` into: its partial sums when it
        is all-reduced before a slice, the whole value when XLA does not partition
        its op (``OpNeeds.whole``)."""
        return self.partial.get(value) or self.whole.get(value) or self.bytes_of(value)

    def all_reduced_bytes(self, value: int) -> int:
        """Bytes of an all-reduced ``value``'s buffers around its all-reduce: in the
        type the platform all-reduces its element type in (XLA:CPU's
        ``AllReducePromotion`` converts a bf16 all-reduce's operand to f32, reduces,
        and converts the result back in its readers' fusions: the f32 operand and
        result are buffers, ``convert_bitcast_fusion.*`` and ``all-reduce.*`` in a
        scanned bf16 step's backward loop)."""
        size = self.reduced_bytes(value)
        if self.feeds_output(value, self.graph.value_def[value]):
            # its f32 result is placed in the allocation of the output computed from
            # it (vit_bf16's weight gradients: all-reduce.37{k} in the f32 outputs')
            return size
        element = self.values.tensor(value).element_bytes
        dtype = self.slot(value).key[1] if element else None
        wide = self.rules.element_bytes_in_collective(element, dtype) if element else 0
        return size * wide // element if wide > element else size

    def feeds_output(self, value: int, op: int) -> bool:
        """Whether a chain of fusible ops keeping ``value``'s number of elements leads
        from it to the main function's return (some output is computed from it
        element by element)."""
        graph = self.graph
        shape = graph.value_shape[value]
        elements = prod(shape) if shape is not None else -1
        stack, seen = [(value, op)], set()
        while stack:
            current, owner = stack.pop()
            if current in seen or len(seen) > 256:
                continue
            seen.add(current)
            for user, _ in graph.uses[current]:
                top = self.top_user(user, owner)
                if graph.op_name[top] == "func.return":
                    return True
                if top != user or graph.op_name[user] not in FUSIBLE:
                    continue
                for result in graph.op_results[user]:
                    found = graph.value_shape[result]
                    if found is not None and prod(found) == elements:
                        stack.append((result, user))
        return False

    def materialised(self, value: int, op: int) -> bool:
        graph = self.graph
        if value in self.exchanged:
            return True  # an all-to-all writes it (``OpNeeds.exchanged``)
        if value in self.windowed and self.rules.writes_halo_windows and (
                self.reader_names(value, op) & ELEMENTWISE_OPS):
            # the halo exchange's concatenated array (``OpNeeds.windowed``), which
            # elementwise readers read their slices of (a split's ``silu(g) * u``);
            # read by a reshape for dots, a fusion copies the slice out of it and the
            # array dies there (a fused QKV projection's split: the slice's own buffer)
            return True
        if self.fused_into_dots(value, op):
            return False
        name = graph.op_name[op]
        if name == "stablehlo.convert" and graph.uses[value] and all(
                (value, u) in self.widened for u, _ in graph.uses[value]):
            # a cast read only by dots through their wide copies is computed in the
            # convert writing that copy (a bf16 policy's cast of an f32 weight:
            # XLA:CPU's convert_convert_fusion, f32 to bf16 to f32, no bf16 weight;
            # a bf16 activation a dot reads stays a buffer)
            return False
        if name in _FREE and value not in self.moved:
            return False
        if name == "stablehlo.broadcast_in_dim" and graph.uses[value] and all(
                self.padded(top) for _, top in self.readers(value, op)):
            return False  # the zeros a pad writes around its update (``padded``)
        users = self.reader_names(value, op)
        if name == "stablehlo.transpose" and users == {"stablehlo.dot_general"}:
            return False  # XLA's transpose folding makes it the dot's dimension numbers
        copied = [self.reads_copy(value, u) for u, _ in graph.uses[value]]
        if name in FUSIBLE and any(copied) and all(
                c or self._fusing_reduction(u, op)
                for c, (u, _) in zip(copied, graph.uses[value])):
            # read only through the transposed copies made for its readers, it is
            # computed inside them: a kernel's reverse for a convolution's input
            # gradient is fused into the copy (conv_net's transpose_copy_fusion.5);
            # a reduction reading it too fuses it as well, every reader can
            # (``InstructionFusion::ComputeGloballyUnfusible``): a conv layer's output
            # gradient, read by its kernel's gradient and summed for its bias's
            # (nnx_bn_train_eval's add_reduce_fusion and transpose_copy_fusion.1)
            return False
        fusible = self.rules.fusible
        if (name in FUSIBLE or name in fusible) and users <= _FUSING_CONSUMERS | fusible:
            return self.shared(value, op) or self.outside_offloaded_reduction(value, op) \
                or self.code_copies.too_many(value)
        return True

    def padded(self, op: int) -> bool:
        """Whether ``op`` writes an update at constant indices over a broadcast of a
        constant number: XLA's simplifier makes it a pad of the update (an
        overwriting scatter becomes a dynamic-update-slice, one into a broadcast
        scalar at constant indices a pad), a buffer written where the op runs, not
        the zeros made first thing and updated in place: jaxopt's L-BFGS histories,
        ``zeros.at[0].set(s)``, are ``bitcast_pad_fusion``s live from their solve's
        loop on, each solve's apart."""
        graph = self.graph
        name = graph.op_name[op]
        operands = graph.op_operands[op]
        if name == "stablehlo.dynamic_update_slice":
            indices = operands[2:]
        elif name == "stablehlo.scatter" and len(graph.op_results[op]) == 1 \
                and not batching_dims(graph, op):
            args, body = graph.op_blocks[op][0] if graph.op_blocks[op] else ([], [])
            if not body or len(args) != 2 or graph.op_operands[body[-1]] != [args[1]]:
                return False  # it combines the update with the zeros
            indices = [operands[indices_operand(graph, op)]]
        else:
            return False
        base = self.root(operands[0])
        owner = graph.value_def[base]
        memo: dict[int, bool] = {}
        return owner >= 0 and graph.op_name[owner] == "stablehlo.broadcast_in_dim" \
            and self.folds(base, memo) and all(self.folds(v, memo) for v in indices)

    def _fusing_reduction(self, user: int, op: int) -> bool:
        """Whether ``user`` is a reduction of ``op``'s block in a loop fusion of its
        own (not one XLA:CPU hands to YNNPACK), which fuses its operands' producers."""
        return self.top_user(user, op) == user and \
            self.graph.op_name[user] == "stablehlo.reduce" and \
            not self.offloaded_reduction(user)

    def reader_names(self, value: int, op: int) -> set[str]:
        """The names of the ops of ``op``'s block reading ``value``, seen through the
        ops that pass it on unmoved (a sharding constraint): a constrained ``silu(g) * u``
        read by dots is a buffer as an unconstrained one is (PaLM-like MLPs'
        ``multiply_bitcast_fusion``, live from the forward's dot to the backward's). A
        pass-on that moves the value is a collective, which reads a buffer."""
        names = self.graph.op_name
        return {_COLLECTIVE if user == top and names[user] in _PASS_ON else names[top]
                for user, top in self.readers(value, op)}

    def readers(self, value: int, op: int) -> list[tuple[int, int]]:
        """``(user, the op of op's block containing it)`` for each op reading ``value``
        (made by ``op``), seen through the ops that pass it on unmoved; a pass-on
        that moves it is a reader."""
        graph = self.graph
        found: list[tuple[int, int]] = []
        stack = [value]
        while stack:
            for user, _ in graph.uses[stack.pop()]:
                top = self.top_user(user, op)
                if top == user and graph.op_name[user] in _PASS_ON and not any(
                        r in self.moved for r in graph.op_results[user]):
                    stack.extend(graph.op_results[user])
                else:
                    found.append((user, top))
        return found

    def reads_copy(self, value: int, user: int) -> bool:
        """Whether dot ``user`` reads ``value`` from the copy made in its layout
        (``OpNeeds.relaid``): not where the dot computes the value itself."""
        return (value, user) in self.relaid and not self.fused_into_dots(
            value, self.graph.value_def[value])

    def fused_into_dots(self, value: int, op: int) -> bool:
        """Whether fusible ``value``, read only by dots, is computed inside each of
        them and never written (``PlatformRules.dot_operand_fusion_devices``).

        XLA:TPU fuses a dot's elementwise operand into the dot's convolution fusion
        where every dot reading it gathers its other operand, or reduces its partial
        sums, over at least that many devices. Seen in its buffer assignments of the
        Llama-shaped steps on v5e 16x16: with "data" of 64 to 256 the logits'
        gradient ``softmax - one_hot`` is computed from the kept logits inside both
        its dots (``fusion.8``, the output projection's gradient, and the input
        gradient's ``async_collective_fusion.480``), and so are a layer's normalised
        inputs and its MLP's ``silu(a) * b``, none of them a buffer; with "data" of 8
        to 32 each is a buffer (``multiply_multiply_fusion`` per norm and layer).
        """
        devices = self.rules.dot_operand_fusion_devices
        if not devices:
            return False
        known = self._in_dots.get(value)
        if known is not None:
            return known
        graph = self.graph
        found = bool(
            op >= 0 and graph.op_name[op] in FUSIBLE and graph.op_name[op] not in _FREE
            and value not in self.moved and op not in self.reduced
            and len(graph.op_results[op]) == 1 and graph.uses[value]
            and all(self.top_user(u, op) == u and graph.op_name[u] == "stablehlo.dot_general"
                    and self._collective_devices(u) >= devices for u, _ in graph.uses[value]))
        self._in_dots[value] = found
        return found

    def _collective_devices(self, dot: int) -> int:
        """The most devices ``dot`` gathers an operand over or reduces its partial sums
        over (1: none)."""
        devices = 1
        for axis in self.reduced.get(dot, ()):
            name, _, sub = axis.partition(":")
            devices *= int(sub.rsplit(")", 1)[1]) if sub else self.sizes.get(name.strip('"'), 1)
        for need, size, _ in self.needs.get(dot, ()):
            if need[1][0] not in ("transposed", "widened"):
                # the gathered buffer over the shard's, both tiled (a padded shard's: 63.9)
                devices = max(devices, round(size / max(self.bytes_of(need[0]), 1)))
        return devices

    def outside_offloaded_reduction(self, value: int, op: int) -> bool:
        """Whether fusible ``value`` feeds a reduction XLA:CPU hands to YNNPACK whose
        fusion cannot take ``op`` in (``_YNN_FUSED``): the reduction's fusion reads it
        from a buffer its own loop fusion writes."""
        graph = self.graph
        if graph.op_name[op] in _YNN_FUSED or not self.rules.offloaded_reduction_elements:
            return False
        return any(self.offloaded_reduction(self.top_user(u, op), within=_YNN_FUSED)
                   for u, _ in graph.uses[value])

    def shared(self, value: int, op: int) -> bool:
        """Whether XLA keeps a fusible value that several ops read instead of fusing
        it into each of them (duplicating it).

        XLA's fusion duplicates a producer into several consumers only when it
        is cheap, and a reduction's input read elsewhere too is kept (seen in
        the buffer assignments of the zoo LMs: exp/tanh/rsqrt fusions live from
        the forward into the backward; and of bench/models transformer: the
        residual stream, read by a layer norm's reductions and the next add).
        XLA's own rule (``InstructionFusion::ComputeGloballyUnfusible``, see
        ``duplication``) fuses some such values into every reader
        (cnn_batchnorm's ReLU gradient), but replacing the reduction rule by a
        replay of it lost the zoo LMs' kept layer-norm inputs. Where the value is
        cheap to duplicate (it reads one large operand: a relu of a convolution's
        output, read by a layer norm's reductions and its elementwise ops), XLA
        fuses it into every reader, a reduction too (its buffer assignment has the
        convolution's output, no relu); a reduction XLA:CPU hands to YNNPACK reads
        it from a buffer all the same (``offloaded_reduction``).
        """
        if self.rules.duplicates_shared_producers:
            return False
        graph = self.graph
        tops = {self.top_user(u, op) for u, _ in graph.uses[value]}
        if len(tops) < 2:
            return False
        if self.rules.duplicates_cheap_producers and graph.op_name[op] not in _FREE \
                and value not in self.moved and not expensive(graph, op) \
                and cheap_to_duplicate(self, op) \
                and not any(self.offloaded_reduction(t) for t in tops):
            return False
        return graph.op_name[op] in _EXPENSIVE or any(
            graph.op_name[t] == "stablehlo.reduce" or self.offloaded_reduction(t)
            for t in tops)

    def elementwise_sources(self, op: int, value: int, returned: set[int]) -> list[int]:
        """The buffers whose place ``value``, the one result of elementwise ``op``,
        may take where one dies at ``op``: those its kernel (``op`` with the
        producers fused into it) reads element by element only, of its own
        per-device shape and element type.

        XLA's buffer assignment lets an elementwise op or a loop fusion write its
        output over an operand it reads elementwise, of its shape, dying there
        (``HloDataflowAnalysis::CanShareBuffer``: ``IsElementwiseOnOperand``, and
        a fusion's ``AreTransitiveUsesElementwiseOrTuple``): a fused ``tanh(x) * 2
        + 1`` over a dot's dying output is written in the dot's buffer.
        """
        graph = self.graph
        parent = graph.op_parent[op]
        if graph.op_name[op] not in ELEMENTWISE_OPS or graph.op_name[op] in _FREE \
                or len(graph.op_results[op]) != 1 \
                or (parent >= 0 and graph.op_name[parent] in _PER_ELEMENT_BODIES):
            return []  # a reduction's body computes one element, not an array
        if any(copied == value for copied, _ in self.relaid):
            # the copy of it a dot or convolution reads is a fusion of its own that
            # computes it again from the operands (conv_net's transpose_copy_fusion.1
            # reads the select's operands after it), so they outlive it
            return []
        slot = self.slot(value).key
        # an operand read through a resharded copy is not read in place
        copied = {need[0] for need, _, _ in self.needs.get(op, ())}
        read: dict[int, bool] = {}  # buffer -> whether every fused path is elementwise
        stack = [(operand, True) for operand in graph.op_operands[op]]
        seen: set[tuple[int, bool]] = set()
        while stack:
            operand, elementwise = stack.pop()
            if (operand, elementwise) in seen:
                continue
            seen.add((operand, elementwise))
            producer = graph.value_def[operand]
            if producer >= 0 and graph.op_name[producer] in _CONSTANTS:
                continue
            if producer >= 0 and graph.op_parent[producer] == graph.op_parent[op] \
                    and self._fused_away(producer, returned):
                kind = graph.op_name[producer]
                through = elementwise and (kind in ELEMENTWISE_OPS or kind in _PASS_ON)
                stack.extend((v, through) for v in graph.op_operands[producer])
                continue
            buffer = self.root(operand)
            read[buffer] = read.get(buffer, True) and elementwise and operand not in copied
        return [buffer for buffer, elementwise in read.items()
                if elementwise and self.slot(buffer).key == slot]

    def offloaded_reduction(self, op: int, within: frozenset = FUSIBLE) -> bool:
        """Whether ``op`` is, or fuses through a chain of fusible ops each read once
        into, a reduction XLA:CPU hands to YNNPACK: an f32 sum, max or min over at
        least ``PlatformRules.offloaded_reduction_elements`` input elements per
        device (XLA's ``IsReduceOpSupportedByYnn``).

        Such a reduction is a custom fusion of its own that takes the chain's
        elementwise ops but not the values they read, so a value read by the
        chain and by other ops is a buffer: a llama-shaped step's residual
        stream (``wrapped_add``, read by the RMS norm's ``x * x`` fused into
        ``ynn_fusion`` and by the next residual add) and its normalised
        ``x * rsqrt`` (read by the scale's gradient reduction and the scale
        multiply). A smaller reduction is a loop fusion that recomputes the
        chain and its inputs (vit_bf16's and transformer's layer norms).
        ``within``: the ops the chain may pass through.
        """
        graph = self.graph
        for _ in range(64):
            if graph.op_name[op] == "stablehlo.reduce":
                return self._ynn_reduce(op)
            results = graph.op_results[op]
            if graph.op_name[op] not in within or len(results) != 1:
                return False
            readers = {self.top_user(u, op) for u, _ in graph.uses[results[0]]}
            if len(readers) != 1:
                return False
            op = next(iter(readers))
        return False

    def _ynn_reduce(self, op: int) -> bool:
        threshold = self.rules.offloaded_reduction_elements
        if not threshold:
            return False
        graph = self.graph
        operands, results = graph.op_operands[op], graph.op_results[op]
        if len(results) != 1 or not operands or graph.value_shape[operands[0]] is None:
            return False
        if str(ir.ShapedType(graph.values[results[0]].type).element_type) != "f32":
            return False
        body = [graph.op_name[o] for _, nested in graph.op_blocks[op] for o in nested]
        if len(body) != 2 or body[0] not in _YNN_REDUCERS:
            return False
        shard, _ = self.slot(operands[0]).key
        return prod(shard) >= threshold

    def last_read(self, value: int, op: int, position: dict[int, int], returned: set[int],
                  at: int, memo: dict[int, int] | None = None) -> int:
        """Position of the last op that reads ``value``'s buffer (``at`` at least).

        A user XLA fuses into its own consumers (not materialised) reads the
        buffer where those consumers run, so its uses count, recursively.
        ``memo`` (one per block walk: ``position`` and ``returned`` fixed) keeps
        each value's latest reader, so a chain of fusible ops each read twice
        is walked once, not once per path through it.
        """
        return max(at, self._latest_read(value, op, position, returned,
                                         {} if memo is None else memo))

    def _latest_read(self, value: int, op: int, position: dict[int, int],
                     returned: set[int], memo: dict[int, int]) -> int:
        """``last_read`` without its floor: -1 when no reader is in ``position``.

        Depth first with an explicit stack (a fused chain may be longer than
        Python's recursion limit): a value is finished once the fused users'
        results it reads through are.
        """
        graph = self.graph
        through: dict[int, tuple[int, list[int]]] = {}  # value -> (direct latest, fused results)
        stack = [(value, op)]
        while stack:
            current, owner = stack.pop()
            if current in memo:
                continue
            if current not in through:
                latest, fused = -1, []
                # a value also recomputed in its fusing readers is read from its
                # buffer by the others only
                recomputed = current not in returned and self.duplicated(current)
                for user, index in graph.uses[current]:
                    if self.reads_copy(current, user):
                        continue  # the dot reads the value's copy in its layout
                    top = self.top_user(user, owner)
                    if recomputed and top == user and self.fusing(user) \
                            and graph.op_name[user] not in _PASS_ON:
                        continue
                    latest = max(latest, position.get(top, -1))
                    if top != user:
                        continue
                    if self._fused_away(user, returned):
                        results = graph.op_results[user]
                        if graph.op_name[user] == _BARRIER:
                            # an expanded barrier hands each operand on as its own result
                            results = results[index:index + 1]
                        fused.extend((r, user) for r in results)
                        continue
                    for result in graph.op_results[user]:
                        if result in returned or not self.duplicated(result):
                            continue
                        # the user's kernel keeps its value for its non-fusing readers
                        # and its fusing readers compute it again: they read ours
                        for reader, _ in graph.uses[result]:
                            if self.top_user(reader, user) != reader or not self.fusing(reader):
                                continue
                            latest = max(latest, position.get(reader, -1))
                            if self._fused_away(reader, returned):
                                fused.extend((r, reader) for r in graph.op_results[reader])
                through[current] = latest, [r for r, _ in fused]
                waiting = [(r, user) for r, user in fused if r not in memo]
                if waiting:
                    stack.append((current, owner))
                    stack.extend(waiting)
                    continue
            latest, fused = through[current]
            memo[current] = max([latest, *(memo[r] for r in fused)])
        return memo[value]

    def _fused_away(self, op: int, returned: set[int]) -> bool:
        """Whether fusible ``op`` has no buffer: each of its readers computes it."""
        graph = self.graph
        return (graph.op_name[op] in FUSIBLE or graph.op_name[op] in self.rules.fusible) \
            and not any(r in returned or self.materialised(r, op) for r in graph.op_results[op])

    def fusing(self, op: int) -> bool:
        """Whether ``op`` takes its fusible producers fused into its kernel (an
        elementwise op, a broadcast, a reduction not handed to YNNPACK, ...)."""
        name = self.graph.op_name[op]
        if name == "stablehlo.reduce":
            return not self._ynn_reduce(op)
        return name in _FUSING_CONSUMERS or name in self.rules.fusible

    def duplicated(self, value: int) -> bool:
        """Whether XLA both keeps fusible ``value`` in a buffer, for the readers that
        cannot fuse it (a convolution, a loop it starts), and computes it again
        inside each reader that can (``PlatformRules.duplicates_cheap_producers``).

        XLA's fusion duplicates a cheap producer into every consumer it may fuse
        into; only one that reads more than one large operand and more elements
        than it writes is kept from that when a consumer cannot fuse it
        (``duplication``). The buffer then lives until its last non-fusing reader
        and the producer's operands until its last fusing one. Seen in a flax
        ResNet's buffer assignment: a block's ``relu(batch_norm(conv))`` is
        ``broadcast_maximum_fusion.1``, live from the next convolution's start to
        its end, while the backward's ReLU gradient recomputes it from the kept
        convolution output; conv_net's first relu likewise.
        """
        if not self.rules.duplicates_cheap_producers:
            return False
        known = self._duplicated.get(value)
        if known is not None:
            return known
        graph = self.graph
        op = graph.value_def[value]
        found = False
        if op >= 0 and graph.op_name[op] in _PASS_ON and value not in self.moved:
            # passed on unmoved, it is its operand's buffer (``readers``)
            found = self.duplicated(graph.op_operands[op][0])
        elif (op >= 0 and graph.op_name[op] in FUSIBLE and graph.op_name[op] not in _FREE
                and value not in self.moved and op not in self.reduced
                and len(graph.op_results[op]) == 1 and not expensive(graph, op)
                and cheap_to_duplicate(self, op)):
            tops = self.readers(value, op)
            fusing = [u for u, t in tops if u == t and self.fusing(u)
                      and graph.op_name[u] not in _PASS_ON]
            kept_for = {graph.op_name[t] for u, t in tops if u not in fusing}
            found = bool(fusing) and bool(kept_for) and kept_for <= _KEPT_FOR
        self._duplicated[value] = found
        return found

    def recomputed(self, value: int, op: int, last: int, position: dict[int, int],
                   returned: set[int], reads: dict[int, int]) -> bool:
        """Whether the platform recomputes a fusible ``value`` in each reader instead
        of keeping it: every buffer it is computed from (through the fusible ops it
        fuses) is read until ``last`` anyway, so recomputing it costs no memory."""
        graph = self.graph
        if graph.op_name[op] not in FUSIBLE:
            return False
        stack, seen = list(graph.op_operands[op]), set()
        while stack:
            source = stack.pop()
            if source in seen:
                continue
            seen.add(source)
            owner = graph.value_def[source]
            if owner < 0 or graph.op_name[owner] in _CONSTANTS:
                continue  # an argument or a constant: there all along
            if owner not in position:
                return False
            if graph.op_name[owner] in FUSIBLE and not self.materialised(source, owner):
                stack.extend(graph.op_operands[owner])
            elif self.last_read(source, owner, position, returned, 0, reads) < last:
                return False
        return True

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
        value = self.merged.get(value, value)
        while graph.value_def[value] >= 0 and value not in self.moved:
            owner = graph.value_def[value]
            if graph.op_name[owner] in _PASS_ON and graph.op_operands[owner]:
                value = graph.op_operands[owner][0]
            elif graph.op_name[owner] == _BARRIER and self.rules.expands_optimization_barriers:
                # an expanded barrier hands each operand on as its result
                value = graph.op_operands[owner][graph.op_results[owner].index(value)]
            else:
                break
            value = self.merged.get(value, value)
        return value

    def _inner_peak(self, op: int, at: int,
                    frees: dict[int, list[tuple]]) -> tuple[int, int, int]:
        """The peak of ``op``'s regions, the bytes of operands handed to its body, and
        the on-chip bytes a loop body holds (``body_peak``).

        A manual computation's body is inlined by XLA: an operand whose last
        reader is the computation is freed after its last reader inside the
        body, so the body's walk owns it (its outer interval ends before
        ``at``). In pipeline_shard_map the backward computation's operand (the
        transposed output gradient) is copied into a loop carry
        (wrapped_copy.1) and its slot reused before the loop runs.
        """
        graph = self.graph
        blocks = [(args, nested) for args, nested in graph.op_blocks[op] if nested]
        if not blocks:
            return 0, 0, 0
        if graph.op_name[op] == "stablehlo.while":
            peak, chip = max(self.body_peak(nested) for _, nested in blocks)
            return peak, 0, chip
        owned: dict[int, int] = {}
        handed = 0
        args = blocks[0][0]
        if len(args) == len(graph.op_operands[op]):
            for arg, operand in zip(args, graph.op_operands[op]):
                for entry in frees.get(at, []):
                    if entry[0] == operand and operand is not None:
                        owned[arg] = entry[1]
                        handed += entry[1]
                        entry[2].end = at - 1  # the body frees it
        # a case's branches write its results in the case's own buffers (XLA
        # shares a conditional's result with every branch's root: dropout_cond's
        # backward switch writes its weight gradient, conditional.2{0}, in an
        # output's allocation), which the enclosing block counts
        case = graph.op_name[op] == "stablehlo.case"
        inner = max(self.peak(nested, self.yielded(nested) if case else set(),
                              owned=owned if k == 0 else None)[0]
                    for k, (_, nested) in enumerate(blocks))
        return inner, handed, 0

    def _flattened_body(self, op: int, at: int) -> list[Interval] | None:
        """The buffers of loop or case ``op``'s regions, each live while the op (at
        ``at``) runs, placed in the regions' own order (``Interval.order``), on a
        platform that keeps no buffer on chip (else None: the peak is one block).

        XLA's heap simulator runs over the program flattened, a loop's body or a
        conditional's branches, one after the other, in the op's place, so their
        buffers fill gaps between the block's, and leave gaps of their own: the
        llama-shaped rematerialised step's backward body peaks at 858424 live bytes
        in a 1066360-byte heap (HloLiveRange). A branch's buffer is one value as
        any other, which the buffer assigner may place in an output's allocation:
        dropout_cond's backward switch computes its weight gradients' partial sums
        (dot.3, dot.5, dot.7) in the allocation of an output written after it."""
        if self.rules.on_chip_bytes:
            return None
        graph = self.graph
        blocks = [nested for _, nested in graph.op_blocks[op] if nested]
        case = graph.op_name[op] == "stablehlo.case"
        flattened: list[Interval] = []
        for k, block in enumerate(blocks if case else blocks[-1:]):
            record: list[Interval] = []
            self.peak(block, self.yielded(block), record)
            # a region's interval's id -> its copy: ids of this region's intervals
            # only, all alive in ``record`` (a previous region's are freed by now, and
            # their ids may be this region's)
            copies: dict[int, Interval] = {}
            for interval in record:
                first, last = interval.order()
                over = copies.get(id(interval.over)) if interval.over is not None else None
                copies[id(interval)] = Interval(
                    at, at, interval.size, None, fits_output=case and interval.fits_output,
                    within=((k, *first), (k, *last)), over=over)
            flattened.extend(copies.values())
        return flattened

    def body_peak(self, ops: list[int]) -> tuple[int, int]:
        """The peak of a loop body's buffers while the loop runs, and the on-chip
        bytes it holds: on a platform that keeps short-lived buffers on chip
        (``PlatformRules.on_chip_bytes``), the peak of those in HBM (``on_chip``: a
        scanned layer's recomputed activations are VMEM in XLA:TPU's buffer
        assignment as far as it holds them), the rest taking the on-chip memory
        from the buffers around the loop."""
        capacity = self.rules.on_chip_bytes
        if not capacity:
            return self.peak(ops, self.yielded(ops))[0], 0
        record: list[Interval] = []
        self.peak(ops, self.yielded(ops), record)
        return split_peak(record, capacity, STEP * len(ops), step=STEP)

    def unanchored(self, ops: list[int]) -> set[int]:
        """The ops of a block that read no buffer the block computes (only its
        arguments, constants and such ops fused into them): XLA's scheduler
        runs them first, so their buffers are live from the block's start.

        Seen in embedding_heads' schedule (the scatter-add's zero broadcast,
        wrapped_broadcast.2, at position 13 of 57, its scatter at 47) and in
        lm_linen_unconstrained's (the backward's transposed weight copies,
        wrapped_copy.*, at positions 134-137, before the forward's layers).
        A loop's initial value is the exception: XLA merges equal broadcasts
        and copies the one a loop starts from into its carry right before the
        loop (grad_loops: its zero broadcasts run first, the copies next to
        each while). A value XLA's constant folding makes a constant anchors
        nothing, and a broadcast such an op reads is fused into it even where it is
        a buffer for others (XLA's ``IsAlwaysDuplicable``): e3nn's readout gradient,
        a gather of a parameter over a broadcast of a square root of a constant, runs first
        (broadcast_gather_fusion at position 25 of 119) beside the broadcast's
        own buffer (wrapped_broadcast).
        """
        graph = self.graph
        inside = set(ops)
        found: set[int] = set()
        folded: dict[int, bool] = {}
        for op in ops:
            if graph.op_name[op] in _CONSTANTS or graph.op_blocks[op]:
                continue
            if all(graph.value_def[v] not in inside
                   or graph.op_name[graph.value_def[v]] in _CONSTANTS
                   or self.folds(v, folded)
                   or (graph.value_def[v] in found
                       and (not self.materialised(v, graph.value_def[v])
                            or graph.op_name[graph.value_def[v]] == _BROADCAST))
                   for v in graph.op_operands[op]) and not any(
                    graph.op_name[self.top_user(u, op)] == "stablehlo.while"
                    for r in graph.op_results[op] for u, _ in graph.uses[r]):
                found.add(op)
        return found

    def yielded(self, block: list[int]) -> set[int]:
        """The values a nested block returns, and the ops' values producing them.

        A while body writes them straight into its carries, which the
        enclosing block counts as the loop's results: XLA's buffer assignment
        shares a while body's root with its parameter (in pipeline_shard_map
        the backward loop's gradient accumulator, bitcast_add_fusion, takes
        the carry's slot at wrapped_broadcast.5's offset).
        """
        returned = set(self.graph.op_operands[block[-1]])
        return returned | {self.root(value) for value in returned}

    @staticmethod
    def _extend(frees: dict[int, list[tuple]], value: int, last: int, holder: int) -> bool:
        """Keep ``value``'s buffer (if it is live) until position ``last``, where
        ``holder`` (a value written in place or sharing it) is in it."""
        for at, entries in list(frees.items()):
            for entry in entries:
                if entry[0] == value:
                    entry[2].holders.append(holder)
                    if at < last:
                        entries.remove(entry)
                        frees.setdefault(last, []).append(entry)
                        entry[2].end = last
                    return True
        return False

    @staticmethod
    def _dying(frees: dict[int, list[tuple]], at: int, value: int) -> Interval | None:
        """The interval of the buffer holding ``value`` where it dies at ``at``."""
        return next((entry[2] for entry in frees.get(at, [])
                     if entry[0] == value or value in entry[2].holders), None)

    @staticmethod
    def _take_over(frees: dict[int, list[tuple]], at: int, value: int, size: int,
                   last: int, holder: int) -> bool:
        """Keep the buffer holding ``value``, dying at ``at``, until ``last`` for
        ``holder`` (``size`` bytes) written in it, where it is large enough."""
        dying = [entry for entry in frees.get(at, [])
                 if entry[0] == value or value in entry[2].holders]
        if not dying or dying[0][1] < size:
            return False
        frees[at].remove(dying[0])
        frees.setdefault(max(last, at), []).append(dying[0])
        dying[0][2].end = max(last, at)
        dying[0][2].holders.append(holder)
        return True

    def loop_body(self, op: int, k: int) -> tuple[list[int], list[int]] | None:
        """The arguments and ops of while loop ``op``'s body, where it has a carry
        ``k`` (else None)."""
        graph = self.graph
        if graph.op_name[op] != "stablehlo.while" or len(graph.op_blocks[op]) < 2:
            return None
        args, body = graph.op_blocks[op][1]
        return (args, body) if body and k < len(args) else None

    def passed_through(self, op: int, k: int) -> bool:
        """Whether ``op`` is a while loop whose body returns its carry ``k`` unchanged."""
        loop = self.loop_body(op, k)
        if loop is None:
            return False
        args, body = loop
        returned = self.graph.op_operands[body[-1]]
        return k < len(returned) and returned[k] == args[k]

    def passed_by_branch(self, op: int, k: int) -> tuple[int | None, bool]:
        """A value defined outside case ``op`` (its root) that a branch returns as
        the case's result ``k``, and whether every branch returns it; (None, False)
        where no branch returns one."""
        graph = self.graph
        if graph.op_name[op] != "stablehlo.case":
            return None, False
        returned = [graph.op_operands[nested[-1]][k] for _, nested in graph.op_blocks[op]
                    if nested]
        for value in returned:
            owner = graph.value_def[value]
            # the op defining it, or for a block argument the op whose block it is
            owner = graph.op_parent[owner] if owner >= 0 else graph.value_owner[value]
            while owner >= 0 and owner != op:
                owner = graph.op_parent[owner]
            if owner < 0:
                return self.root(value), all(v == value for v in returned)
        return None, False

    def post_order(self, ops: list[int], reads: dict[int, list[int]]) -> list[int]:
        """``ops`` in XLA's post order of a computation
        (``HloComputation::MakeInstructionPostOrder``): a depth-first walk from
        each op nothing in the block reads (the return last), an op's operands
        (``reads``: values it and its regions read) first to last, each op after
        all it reads."""
        graph = self.graph
        index = set(ops)
        read = {op: [graph.value_def[v] for v in reads[op] if graph.value_def[v] in index]
                for op in ops}
        unread = set(ops).difference(*read.values())
        done: set[int] = set()
        order: list[int] = []
        for top in ops:
            if top not in unread:
                continue
            stack, visiting = [top], set()
            while stack:
                op = stack[-1]
                if op in visiting or op in done:
                    stack.pop()
                    if op not in done:
                        done.add(op)
                        order.append(op)
                    continue
                visiting.add(op)
                stack.extend(reversed(read[op]))
        return order

    def breadth_first(self, ops: list[int]) -> tuple[list[int], dict[int, int]]:
        """A block's ops in the order XLA:CPU runs them, and for each all-reduced op
        the position in that order of the op its all-reduce runs after.

        XLA:CPU schedules a computation breadth first (``BFSMemoryScheduler``, its
        concurrency-optimised scheduler): the ops reading nothing the computation
        computes are queued first, in the order listed, and an op joins the queue
        once the last op it reads has run; an all-reduce is an op of its own,
        queued when the op whose partial sums it adds runs, behind the ops ready by
        then. In a cond's gradient branch both transposed dots read only the
        branch's parameter: the weight gradient's partial sum (dot.5) is reduced
        (all-reduce.8) after the input gradient's dot (ynn_fusion.4), live across
        it, and the transpose of its result runs last."""
        graph = self.graph
        body, end = ops[:-1], ops[-1:]  # the return stays last
        inside = set(body)
        readers: dict[object, list[object]] = {}
        waiting: dict[object, int] = {}
        queue: deque = deque()
        for op in body:
            # constants are no reads: XLA fuses them into their readers; a reduced
            # op's value is read once its all-reduce has run
            read = {graph.value_def[v] for v in self.operands_within(op)
                    if graph.value_def[v] in inside
                    and graph.op_name[graph.value_def[v]] not in _CONSTANTS}
            read = {("all-reduce", r) if r in self.reduced else r for r in read}
            waiting[op] = len(read)
            for r in read:
                readers.setdefault(r, []).append(op)
            if op in self.reduced:
                waiting[("all-reduce", op)] = 1
                readers.setdefault(op, []).append(("all-reduce", op))
            if not read:
                queue.append(op)
        order: list[int] = []
        after: dict[int, int] = {}
        while queue:
            node = queue.popleft()
            if isinstance(node, tuple):
                after[node[1]] = len(order) - 1
            else:
                order.append(node)
            for reader in readers.get(node, ()):
                waiting[reader] -= 1
                if not waiting[reader]:
                    queue.append(reader)
        return order + end, after

    def listed(self, op: int, axis: str) -> tuple:
        """The key XLA's combiner groups ``op``'s all-reduce over ``axis`` by
        (``AllReduceKey``): the reduction (optax's adafactor: the gradients' sums
        in all-reduce.20, the finiteness checks' ``and`` in all-reduce.21), the
        element type and the replica groups as listed. The partitioner lists a
        reduction's groups in the mesh's order and a dot's partial sums' in the
        order of its tiles; the two lists differ where two or more other axes
        split the devices, and all-reduces so listed are never combined
        (grad_loops on data x fsdp x model: the dots' all-reduce.14 over ``fsdp``
        lists {{0,2},{4,6},{1,3},{5,7}}, the loss's all-reduce.11 over ``fsdp``
        the mesh's order, apart; optax's prodigy on fsdp x model: a gradient's
        and a sum's combined)."""
        graph = self.graph
        name = axis.split('"')[1] if '"' in axis else axis  # '"fsdp"' or '"fsdp":(1)2'
        others = sum(1 for other, size in self.sizes.items() if other != name and size > 1)
        dot = graph.op_name[op] == "stablehlo.dot_general"
        body = [graph.op_name[inner] for _, nested in graph.op_blocks[op] for inner in nested]
        reduction = body[0] if body and not dot else "stablehlo.add"
        element = None
        results = graph.op_results[op]
        if results and graph.value_shape[results[0]] is not None:
            # in the type the platform all-reduces it in (XLA:CPU's AllReducePromotion
            # runs first: a bf16 gradient's sum is an f32 all-reduce)
            dtype = str(ir.ShapedType(graph.values[results[0]].type).element_type)
            element = (dtype.startswith(("f", "bf")), self.rules.element_bytes_in_collective(
                self.values.tensor(results[0]).element_bytes, dtype))
        return axis, reduction, element, others > 1 and dot

    def combined(self, ops: list[int]) -> dict[int, int]:
        """Results of all-reduces XLA combines: value -> position of the last member's
        op (the combined all-reduce runs right after it).

        XLA:CPU's all-reduce combiner (``CombineInstructionsByKey``, no byte limit,
        256 operands) walks the computation in post order (``post_order``): the
        first all-reduce not yet combined opens a group, later ones over the same
        axes join it until one depends on a member, which closes it; all-reduces
        over other axes in between neither join nor break it (a checkpointed
        layer's weight gradients, reduced over ``data``, between its input
        gradients' reductions over ``model``: all-reduce.15, a tuple of the eight
        weight gradients). The walk restarts until every all-reduce is placed.
        All the members' results are live together where the last of them runs.
        An optimizer that sums each gradient's products as soon as it is reduced
        (optax's prodigy: a scalar all-reduce over the gradient's axes after each
        one in post order) splits them into groups of one gradient each
        (all-reduce.50, ``(f32[], f32[32,32])``).
        """
        graph = self.graph
        if not any(op in self.reduced for op in ops):
            return {}
        reads = {op: self.operands_within(op) for op in ops}
        order = self.post_order(ops, reads)
        position = {op: STEP * i for i, op in enumerate(ops)}
        # op -> the axes of its all-reduces not yet combined: a reduction over
        # several axes is one all-reduce per axis (optax's prodigy: the sum of a
        # gradient sharded over ``model`` and ``fsdp`` is all-reduce.49 over
        # ``model`` then all-reduce.50 over ``fsdp``)
        open_ = {op: [self.listed(op, axis) for axis in self.reduced[op]]
                 for op in order if op in self.reduced}
        extend: dict[int, int] = {}
        first = 0
        while open_:
            while order[first] not in open_:
                first += 1
            group: list[int] = []
            key = open_[order[first]][0]
            reaching: set[int] = set()  # values depending on the group's members
            for op in order[first:]:
                depends = any(v in reaching for v in reads[op])
                if key in open_.get(op, ()):
                    if depends:
                        break
                    group.append(op)
                    open_[op].remove(key)
                    if not open_[op]:
                        del open_[op]
                    if len(group) == _COMBINED_OPERANDS:
                        break
                    reaching.update(graph.op_results[op])
                elif depends:
                    reaching.update(graph.op_results[op])
            if len(group) > 1:
                last = max(position[op] for op in group)
                for op in group:
                    for value in graph.op_results[op]:
                        extend[value] = max(extend.get(value, last), last)
        return extend

    def peak(self, ops: list[int], returned: set[int],
             record: list[Interval] | None = None, *,
             owned: dict[int, int] | None = None) -> tuple[int, int]:
        """Live peak of one block's ops (and the op where it is reached).

        With ``record``, every buffer's live interval (``STEP`` positions per op) is
        appended to it, for placing temporaries in output buffers afterwards.
        ``owned`` (block argument -> bytes) are buffers the block frees after
        their last reader.
        """
        graph = self.graph
        owner = graph.op_name[graph.op_parent[ops[0]]] if ops else ""
        reduced_after = {op: k for k, op in enumerate(ops) if op in self.reduced}
        if owner == "stablehlo.case":
            ops, reduced_after = self.breadth_first(ops)
        position = {op: STEP * i for i, op in enumerate(ops)}
        # XLA reshards a value once per target sharding and reuses it (CSE): the
        # buffer is live from the first consumer to the last one in this block.
        spans: dict[tuple, list[int]] = {}
        # a span's key -> bytes its reshard writes before the buffer its readers read
        copies: dict[tuple, int] = {}
        read_narrow: set[tuple] = set()  # reshards some op reads as they are, not wide
        narrow_keys: dict[tuple, set[tuple]] = {}  # a span's key -> the needs' own keys
        for op, i in position.items():
            for need, size, copy in () if op in self.merged_ops else self.needs.get(op, ()):
                if need[1][0] == "transposed" and not self.reads_copy(need[0], op) \
                        and (need[0], op) in self.relaid:
                    continue  # the dot computes the value itself
                # one reshard per value as XLA sees it (through an expanded barrier: the
                # backward's recomputation of a checkpointed layer reads the forward's
                # gathered weight, the gathers merged by CSE)
                key = (self.root(need[0]), need[1]) if self.merged_ops else need
                narrow_keys.setdefault(key, set()).add(need)
                if key in spans:
                    spans[key][1] = i
                else:
                    spans[key] = [i, i, size]
                    copies[key] = copy
                if graph.op_name[op] != "stablehlo.dot_general":
                    read_narrow.add(key)
        # XLA's scheduler runs a reshard of an argument first thing: it depends on
        # nothing else, so its buffer is live from the block's start. A sharding
        # constraint on the argument changes nothing: lm_linen_unconstrained's weight
        # all-gathers for the backward (all-gather.17/.20/.28, constrained arguments)
        # run at positions 116-141 of its schedule, before the forward's layers.
        # A transposed copy XLA makes for a dot or convolution is scheduled right
        # after its operand is computed.
        args = set(self.block_args.get(ops[0], ())) if ops else set()
        gathered: dict[int, list[tuple[int, int, bool]]] = {}
        copying: dict[int, int] = {}  # position -> bytes of reshards being copied there
        for (value, target), (first, last, size) in spans.items():
            if self.root(value) in args and self.rules.reshards_arguments_first:
                first = 0
            elif target[0] == "transposed" and self.graph.value_def[value] >= 0:
                first = min(first, position.get(
                    self.top_user(self.graph.value_def[value], ops[0]), first))
            if narrow_keys[(value, target)] <= self.converted and (value, target) not in read_narrow:
                last = first  # the dots read its wide copy, converted right after it
            gathered.setdefault(first, []).append(
                (self.aligned(size), last, target[0] not in ("transposed", "widened")))
            copy = copies[(value, target)]
            if copy:
                # A gather in a transposed layout is copied back (an all-to-all's
                # pieces concatenated) before its first reader runs, and that reader
                # reads the copy: both live together after the op before it, the
                # gather dead once copied (the span's buffer stands for the copy from
                # there). An rfft of a signal gathered whole: all-gather.3 and copy.5
                # of c64[16,8,33] at one moment, the fft's result written where
                # all-gather.3 was. The arguments' gathers run first, each copied
                # back before the next.
                if first == 0:
                    copying[0] = max(copying.get(0, 0), self.aligned(copy))
                else:
                    copying[first - 1] = copying.get(first - 1, 0) + self.aligned(
                        copy) + self.aligned(size)
        extend = self.combined(ops)
        # An all-reduce writes a buffer apart from its operand's, both live while it
        # runs; a combined one runs where the last of its members is, so all the
        # members' operands are live there with their results (eqx_partition_jit's
        # gradients: all-reduce.15, a tuple of ten, at position 74 of its schedule).
        # The reduced copies stay in the heap. A value whose one reader chain writes an
        # output is counted once: XLA puts its operand in that output's allocation
        # (mlp_data_parallel's gradients, reduced, then copied transposed into the
        # outputs: dot.5-7 in the outputs' allocations, all-reduce.4's tuple in the
        # heap, where the value's own interval stands for it).
        # position -> (bytes, whether an output's allocation may hold it)
        reducing: dict[int, list[tuple[int, bool]]] = {}
        for op, i in position.items():
            if op in self.reduced and op not in self.merged_ops:
                for value in graph.op_results[op]:
                    # a reduce-scatter's result is the buffer it writes (``needs``); a
                    # returned value's output holds one of its partial sums and its
                    # all-reduce's result, the other is a temporary: a combined
                    # all-reduce's tuple of results is copied into the outputs
                    # (``jax.grad``'s weight gradients: the dots written in the outputs'
                    # allocations, all-reduce.15{0..7} in the heap, then wrapped_copy.*)
                    if value not in self.scattered and (
                            value in returned or not self.one_output(value, op)):
                        # it runs after the op, once the op's operands are freed,
                        # and after the ops ready by then (``reduced_after``)
                        at = extend.get(value, STEP * reduced_after[op]) + 1
                        # a widened all-reduce's operand is a separate array (its convert)
                        wide = self.all_reduced_bytes(value)
                        reducing.setdefault(at, []).append(
                            (self.aligned(wide), wide > self.reduced_bytes(value)))
        if self.rules.tuple_pointer_bytes:
            # a combined all-reduce is tuple-shaped: its table of pointers too
            # (eqx_partition_jit's all-reduce.15{}, ten pointers)
            members: dict[int, int] = {}
            for at in extend.values():
                members[at] = members.get(at, 0) + 1
            for at, count in members.items():
                self.tables[("combined", ops[0], at)] = self.rules.table_bytes(count)
        widened: set[int] = set()  # all-reduced results wider than their values
        # a branch's ops read the values around the case through its one parameter:
        # none is hoisted to the branch's start as the entry's argument readers are
        # (a cond's gradient: its transposed dots, both reading forward values, live
        # from the branch's start were 1.42x XLA's net, 1.14x walked in order)
        early = self.unanchored(ops) if owner != "stablehlo.case" else set()
        carries = args if owner == "stablehlo.while" else set()
        frees: dict[int, list[tuple]] = {}
        live, best, best_op = 0, 0, -1
        reads: dict[int, int] = {}  # last_read's memo for this block
        for arg, size in (owned or {}).items():
            last = self.last_read(arg, ops[0], position, returned, 0, reads)
            live += size
            frees.setdefault(last, []).append((arg, size, Interval(0, last, size, None)))
        for op, i in position.items():
            if op in self.merged_ops:
                for at in (i, i + 1):
                    for _, size, _ in frees.pop(at, []):
                        live -= size
                continue  # its readers read the op it merged into
            allocated = [(None, size, last, moved) for size, last, moved in gathered.get(i, ())]
            over: dict[int, Interval] = {}  # result -> the dying operand's buffer it takes
            for k, value in enumerate(graph.op_results[op]):
                if value in returned or not self.materialised(value, op):
                    continue
                size = self.windowed.get(value) or self.reduced_bytes(value)
                if op in self.reduced and not self.one_output(value, op):
                    # the all-reduce's result, in the type it is reduced in; a widened
                    # one is an array of its own that XLA may place in an output's
                    # allocation, combined or not
                    wide = self.all_reduced_bytes(value)
                    if wide > size:
                        widened.add(value)
                        size = wide
                last = self.last_read(value, op, position, returned, i, reads)
                if value in extend:
                    last = max(last, extend[value] + 1)  # an operand of the combined op
                elif STEP * reduced_after.get(op, -1) > i:
                    last = max(last, STEP * reduced_after[op] + 1)  # its all-reduce's
                if graph.op_name[op] == "stablehlo.reshape":
                    # a reshape of a row-major array is a bitcast in XLA: it shares its
                    # operand's buffer (an argument's, or a live temporary's)
                    operand = self.root(graph.op_operands[op][0])
                    if graph.value_def[operand] < 0 or self._extend(frees, operand, last, value):
                        continue
                kept, every = self.passed_by_branch(op, k)
                if kept is not None:
                    if every:
                        # the conditional's result is that value's buffer (XLA's dataflow
                        # resolves the branches' one value: dropout_cond's switch returns
                        # its operand h, conditional.1{2}, which has no buffer of its own)
                        self._extend(frees, kept, last, value)
                        continue
                    # one buffer holds a value some branch returns and the result it
                    # is merged into, where the value dies at the case (equinox's error
                    # checks: diffrax_dense_adjoints' conditional.11{2} at its operand's
                    # offset, the failing branch writing its callback's values there)
                    if self._take_over(frees, i, kept, size, last, value):
                        continue
                source = _IN_PLACE.get(graph.op_name[op], lambda k: None)(k)
                if source is not None and source < len(graph.op_operands[op]):
                    # the buffer is its root's: a loop's initial value passed on by a
                    # sharding constraint (flax nnx's scanned carries' zero broadcasts)
                    # is updated in place as an unconstrained one is
                    operand = self.root(graph.op_operands[op][source])
                    if operand in carries:
                        continue  # updated in the loop-carried buffer
                    if self.passed_through(op, k):
                        # a carry the loop body returns unchanged is its init value: XLA
                        # hoists it out of the loop; the init buffer lives on instead
                        self._extend(frees, operand, last, value)
                        continue
                    # the result takes over its operand's buffer (XLA updates in place)
                    if self._take_over(frees, i, operand, size, last, value):
                        continue
                if self.rules.recomputes_fused_values and self.recomputed(
                        value, op, last, position, returned, reads):
                    continue
                dying = None if op in self.reduced or value in extend else next(
                    filter(None, (self._dying(frees, i, source) for source in
                                  self.elementwise_sources(op, value, returned))), None)
                if dying is not None:
                    # written over an operand dying here: XLA's heap simulator shares
                    # the two buffers where neither went into an output's allocation
                    over[value] = dying
                allocated.append((value, self.aligned(size), last, False))
            self.tables.update(self.tuple_tables.of(op))
            flattened = graph.op_name[op] in ("stablehlo.while", "stablehlo.case")
            inner, handed, chip = self._inner_peak(op, i, frees)
            body = self._flattened_body(op, i) if record is not None and flattened else None
            if body is not None:
                record.extend(body)
            transient = (0 if body is not None else inner) + copying.get(i, 0) + (
                self.aligned(self.extra[op]) if self.extra.get(op) else 0)
            # a manual computation's body writes the op's results: its own peak holds
            # them while it runs; a reduction's, sort's or scatter's body computes one
            # element at a time (its results are the op's), a case's branches write
            # the case's results (``_inner_peak``)
            inside = set() if graph.op_name[op] in _WRITING_OWN_RESULTS or not inner \
                else set(graph.op_results[op])
            now = (live - handed + sum(s for v, s, _, _ in allocated
                                       if v not in inside and v not in over)
                   + transient + (inner if body is not None else 0))
            if now > best:
                best, best_op = now, op
            if record is not None and transient:
                # nested peaks and buffers live only while the op runs stay in the heap
                record.append(Interval(i, i, transient, None, fits_output=False, on_chip=chip))
            for value, size, last, moved in allocated:
                live += size
                buffer = None
                if value is not None:
                    buffer = Allocation(value, op, size)
                    self.buffers.append(buffer)
                start = i + 1 if value in inside or value in over else (
                    0 if op in early else i)
                # a combined all-reduce is one tuple-shaped op in XLA: its results
                # stay in the heap (mlp_data_parallel's gradients, buffer assignment);
                # a branch's result is the conditional's, so the value a branch
                # reduces into its result stands for the partial sums, a buffer as
                # any other (dropout_cond: dot.5, all-reduce.11's operand, in an
                # output's allocation, all-reduce.11{0} in the conditional's result)
                fits = value not in extend or value in widened or (
                    owner == "stablehlo.case" and self.one_output(value, op))
                interval = Interval(start, max(last, start), size, buffer,
                                    fits_output=fits,
                                    holders=[] if value is None else [value], moved=moved,
                                    over=over.get(value))
                if record is not None and last >= start:
                    record.append(interval)
                frees.setdefault(max(last, i), []).append((value, size, interval))
            for _, size, _ in frees.pop(i, []):
                live -= size
            # the all-reduces run after the op: their buffers with what outlives it
            # and the next op's gathers are copied back (``copying``)
            after = [*reducing.get(i + 1, ()), *([(copying[i + 1], False)]
                                                 if i + 1 in copying else ())]
            if live + sum(n for n, _ in after) > best:
                best, best_op = live + sum(n for n, _ in after), op
            if record is not None:
                record.extend(Interval(i + 1, i + 1, size, None, fits_output=fits)
                              for size, fits in after)
            for _, size, _ in frees.pop(i + 1, []):
                live -= size
        return best, best_op


def loc_text(op: ir.Operation) -> str | None:
    """``file:line`` of an op's source location (None when it has none)."""
    loc = source_loc_of(op.location)
    return f"{loc.file}:{loc.line}" if loc else None
