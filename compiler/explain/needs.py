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
from math import prod

from jaxlib.mlir.dialects import stablehlo
from jaxlib.mlir.ir import IntegerAttr

from shardc.compiler.cost.custom_partitioning import custom_partitioned_body, is_custom_partitioned
from shardc.compiler.cost.fusion import CHLO_ELEMENTWISE, FREE, FUSIBLE
from shardc.compiler.cost.halos import exchanged_window_bytes, slice_windows
from shardc.compiler.cost.indexed import adjusted_indices_bytes, indexed_communication
from shardc.compiler.cost.op_comm import computation_axes, required_sharding, xla_replicates
from shardc.compiler.cost.platforms import active_rules
from shardc.compiler.cost.report import (
    collectives_at,
    explicit_result_reshard,
    note_reshard,
    partitioned_as,
    reuses_reshard,
)
from shardc.compiler.cost.reshard import (
    ALL_GATHER,
    ALL_REDUCE,
    ALL_TO_ALL,
    REDUCE_SCATTER,
    all_reduce,
    axis_names,
    dim_axes,
    reshard_collectives,
    shard_bytes,
    shard_shape,
)
from shardc.compiler.explain.layout import relayout, transposed_gather
from shardc.compiler.propagation.graph import ELEMENTWISE
from shardc.compiler.propagation.values import ModuleValues
from shardc.compiler.sharding.axes import AxisRef, size_product
from shardc.compiler.sharding.rules import indexed_roles_for
from shardc.compiler.sharding.tensor import DimSharding

RESHARDS = frozenset({"sdy.reshard", "sdy.sharding_constraint"})
_TRANSPOSE = "stablehlo.transpose"
_RESHAPE = "stablehlo.reshape"
_DOTS = frozenset({"stablehlo.dot_general", "stablehlo.convolution"})
# ops that move their operand's elements unchanged
_MOVES = RESHARDS | frozenset({_RESHAPE, _TRANSPOSE, "stablehlo.broadcast_in_dim", "sdy.data_flow_edge"})
_INDEX_BYTES = 4  # the s32 indices XLA's expansions compute
CONSTANTS = frozenset({"sdy.constant", "stablehlo.constant", "stablehlo.iota"})
_INDEXED = frozenset({"stablehlo.gather", "stablehlo.scatter"})
_PASS_ON = frozenset({"sdy.data_flow_edge", "sdy.sharding_constraint",
                      "sdy.propagation_barrier"})
# elementwise ops that compute on their operands' values (a backend without
# arithmetic in an element type computes them in a wider one), and converts
ARITHMETIC = (ELEMENTWISE | CHLO_ELEMENTWISE) - RESHARDS - frozenset({
    "sdy.propagation_barrier", "stablehlo.select", "stablehlo.bitcast_convert"})


@dataclass
class OpNeeds:
    """Per-op buffers and all-reduces beyond the op's own results."""

    extra: dict[int, int] = field(default_factory=dict)  # op -> bytes live while it runs
    # op -> [((operand value, target), bytes, transposed-copy bytes)] resharded operands
    needs: dict[int, list[tuple[tuple, int, int]]] = field(default_factory=dict)
    reduced: dict[int, tuple] = field(default_factory=dict)  # op -> all-reduced axes
    # result -> bytes of its partial sums when the all-reduce precedes a slice
    partial: dict[int, int] = field(default_factory=dict)
    # result -> bytes of the whole value an op XLA does not partition writes, its
    # readers reading their slice of it (``_replicated``)
    whole: dict[int, int] = field(default_factory=dict)
    # (value, op) pairs where the op reads a copy of the value made before it (a
    # dot's second-layout or a convolution's transposed copy, an earlier reshard)
    relaid: set[tuple[int, int]] = field(default_factory=set)
    # results a reduce-scatter writes (a platform that forms them, XLA:TPU): the
    # shard is their buffer, the partial sums live only while their op runs
    scattered: set[int] = field(default_factory=set)
    # explicit reshards that write a buffer of their own: moving data or slicing
    moved: set[int] = field(default_factory=set)
    # (while op, body argument) whose wide copy XLA hoists out of the loop
    hoisted: set[tuple[int, int]] = field(default_factory=set)
    # (value, target) -> its first gather's place (``cost.report.note_reshard``)
    gathers: dict[tuple, tuple | None] = field(default_factory=dict)
    # while op -> bytes of the largest narrow input converted whole before it and
    # read by nothing else
    converted_last: dict[int, int] = field(default_factory=dict)
    # reshards (value, target) some dot reads only as a wide copy
    converted: set[tuple] = field(default_factory=set)
    # (value, dot) where the dot reads the value's wide copy, the value not resharded
    widened: set[tuple[int, int]] = field(default_factory=set)
    # results an indexed op computes in one sharding and all-to-alls to the declared one
    exchanged: set[int] = field(default_factory=set)
    # slice result -> bytes of the array its halo exchange concatenates, which its
    # readers read (``halos.exchanged_window_bytes``)
    windowed: dict[int, int] = field(default_factory=dict)
    # custom_partitioning op -> its partition rule's per-device body (MLIR bytecode)
    bodies: dict[int, bytes] = field(default_factory=dict)
    _resharded: set[tuple] = field(default_factory=set)  # reshard keys seen so far
    _partitions: dict[tuple, tuple] = field(default_factory=dict)  # the callbacks' answers

    @classmethod
    def collect(cls, values: ModuleValues) -> OpNeeds:
        """The needs of every op of ``values``' module."""
        found = cls()
        # (rule, operands, results, mesh, platform) -> (the rule, what ``_rule_needs``
        # finds there)
        memo: dict[tuple, tuple] = {}
        for op in range(len(values.graph.ops)):
            found._collect(values, op, memo)
        if active_rules().copies_operands_per_layout:
            found._copy_per_layout(values)
        if active_rules().expands_batch_group_convolutions:
            found._dense_batch_groups(values)
        return found

    def _dense_batch_groups(self, values: ModuleValues) -> None:
        """Record the dense output of each convolution with a batch group count G > 1
        (a grouped or depthwise convolution's kernel gradient) where the platform runs it
        dense over every group (``PlatformRules.expands_batch_group_convolutions``,
        XLA:CPU's ``ConvolutionGroupConverter``): one convolution whose output holds
        every group against every other, G times the device's part of the result's
        features (as ``cost.flops`` counts its operations), and its diagonal blocks
        selected into a second buffer of that size, which the reduction to the grouped
        result reads (XLA:CPU hands that reduction to YNNPACK, so the select is not fused
        into it: a depthwise 7x7 kernel gradient's ``f32[7,7,64,64]`` convolution and
        ``broadcast_select_fusion`` live together). Both live while the op runs.
        """
        graph = values.graph
        for op, name in enumerate(graph.op_name):
            if name != "stablehlo.convolution":
                continue
            attr = graph.ops[op].attributes
            groups = (IntegerAttr(attr["batch_group_count"]).value
                      if "batch_group_count" in attr else 1)
            tensor = values.tensor(graph.op_results[op][0])
            if groups <= 1 or tensor is None:
                continue
            feature = stablehlo.ConvDimensionNumbers(
                attr["dimension_numbers"]).output_feature_dimension
            local = shard_shape(tensor.shape, dim_axes(tensor.sharding, len(tensor.shape)))
            factor = max(groups * local[feature] // tensor.shape[feature], 1)
            dense = prod(local) * tensor.element_bytes * factor
            self.extra[op] = self.extra.get(op, 0) + 2 * dense

    def _copy_per_layout(self, values: ModuleValues) -> None:
        """Record the second-layout copy of each value dots read in two layouts
        (``PlatformRules.copies_operands_per_layout``).

        XLA:TPU's layout assignment gives a dot's operand the layout its kernel
        wants, the contracted dimensions minor; its matrix unit reads either of an
        operand's two minor dimensions as the contracted one (attention's
        probabilities, saved ``{2,3,1,0}``, serve ``p @ v`` and ``p^T @ dout``). A
        value that one dot contracts over its last dimension and another over a
        dimension before those two (a layer's normalised input ``h``: ``h @ w`` in
        the forward, ``h^T @ dy`` over batch and sequence for the weight's
        gradient) keeps its own layout for the first and is copied for the
        others as soon as it is computed (they read the copy, not the value), the
        copy live until the last of them:
        the llama-shaped step's ``copy.98 = bf16[1,2048,2048]{1,2,0} copy(
        multiply_multiply_fusion.3)`` per norm and layer in XLA:TPU's buffer
        assignment, made in the forward and read by the backward's dot. An
        operand the dot reads resharded (a gathered weight) is the gather's
        buffer, written in the layout wanted.
        """
        graph = values.graph
        for value in range(len(graph.values)):
            minor, other = [], []
            for user, index in graph.uses[value]:
                if graph.op_name[user] != "stablehlo.dot_general" or index > 1 or any(
                        key[0] == value for key, _, _ in self.needs.get(user, ())):
                    continue
                contracted = _contracted(graph.ops[user], index)
                rank = len(graph.value_shape[value] or ())
                if contracted is None or not rank:
                    continue
                if rank - 1 in contracted:
                    minor.append(user)
                elif any(dim < rank - 2 for dim in contracted):
                    other.append(user)
            tensor = values.tensor(value) if minor and other else None
            if tensor is None or tensor.sharding is None:
                continue
            size = shard_bytes(tensor.shape, tensor.element_bytes,
                               dim_axes(tensor.sharding, len(tensor.shape)))
            for user in other:
                self.needs.setdefault(user, []).append(
                    ((value, ("transposed", "contracted minor")), size, 0))
                self.relaid.add((value, user))

    def _collect(self, values: ModuleValues, op: int, memo: dict[tuple, tuple]) -> None:
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
            else:
                # a reshard to a narrower sharding is each device's dynamic slice of
                # its shard: fused into readers that fuse it, a buffer of its own for
                # the others (a loop reading it: linen_selfattn_decode's weights,
                # sliced over ``model`` before the decode loop, bitcast_dynamic-
                # slice_fusion.* live while it runs)
                self.moved.add(result)
            return
        if not graph.op_results[op] or name in FREE:
            return
        ruled = values.rule_tensors(op)
        if ruled is None:
            return
        rule, operands, results = ruled
        if all(r.sharding is None for r in results):
            return
        if name == "stablehlo.slice" and operands[0].sharding is not None \
                and results[0].sharding is not None:
            # XLA's slice handler reads the operand at the result's sharding, through a
            # halo exchange where a sliced dimension is sharded in both
            rank = len(results[0].shape)
            window = exchanged_window_bytes(
                operands[0], results[0], slice_windows(graph.ops[op], operands[0].shape),
                dim_axes(results[0].sharding, rank))
            if window:
                self.windowed[graph.op_results[op][0]] = window
        # A dot Shardy's explicit reshards compute as its operands imply: its operands
        # are read as they are, its result written in that sharding and resharded
        # after (the comm report's model). Its operands' reshards to the propagated
        # result's sharding would be a gathered operand XLA never makes (a fori_loop's
        # matrix-vector product over a closed-over row-sharded matrix: 8192 B counted
        # where XLA's temporaries are 344 B).
        computed, moved = explicit_result_reshard(values, op, results)
        if moved:
            self.extra[op] = self.extra.get(op, 0) + shard_bytes(
                computed[0].shape, computed[0].element_bytes,
                dim_axes(computed[0].sharding, len(computed[0].shape)))
            results = computed
        mesh = values.mesh_of(*(t.sharding for t in results + operands))
        if is_custom_partitioned(graph.ops[op]) and mesh:
            partitioned = custom_partitioned_body(graph.ops[op], operands, results, mesh,
                                                  self._partitions)
            if partitioned is not None:
                self._custom_partitioned(graph, op, operands, mesh, *partitioned)
                return
        # Models repeat ops with equal shardings (layers): what the rule needs there
        # depends on nothing else but the platform.
        key = (id(rule), tuple(operands), tuple(results), mesh.key if mesh else None,
               active_rules())
        known = memo.get(key)
        if known is None:
            known = memo[key] = (rule, *_rule_needs(rule, operands, results, mesh))
        _, reduced, wanted, contraction = known
        if xla_replicates(partitioned_as(name, graph.ops[op], operands, mesh)):
            reduced, wanted = set(), self._replicated(graph, op, operands, results, mesh)
        if name in _INDEXED:
            planned = self._indexed(graph, op, rule, operands, results, mesh)
            if planned is not None:
                wanted, summed = planned
                reduced = _axes_named(summed, mesh)
        copied = relayout(graph.ops[op], name, operands, results)
        if copied.pop(-1, 0):  # a result in a non-canonical layout: transposed copy
            self.extra[op] = self.extra.get(op, 0) + sum(
                shard_bytes(r.shape, r.element_bytes, dim_axes(r.sharding, len(r.shape)))
                for r in results)
        if name == "stablehlo.select_and_scatter" and \
                active_rules().expands_select_and_scatter:
            self.extra[op] = self.extra.get(op, 0) + _expanded_select_and_scatter(operands)
        read_as: dict[int, tuple] = {}  # operand index -> (its reshard's key, target axes)
        for index, want in enumerate(wanted):
            value = graph.op_operands[op][index]
            owner = graph.value_def[value]
            if owner >= 0 and graph.op_name[owner] in CONSTANTS:
                continue  # XLA folds a reshaped constant
            if owner >= 0 and graph.op_name[owner] == "stablehlo.broadcast_in_dim" and (
                    _splat(graph, graph.op_operands[owner][0])):
                # XLA's partitioner builds a broadcast constant at the sharding its
                # reader needs (penzai_named_lm's embedding gradient: the scatter-add's
                # zeros, wrapped_broadcast, at the scatter's shard shape, no gather)
                continue
            if want is None:
                continue
            after, moves, size, copy, gathers = want
            if not moves and name in FUSIBLE:
                continue  # a local slice fuses into an elementwise consumer
            if copy and _relaid_by_reader(graph, op, results, size):
                copy = 0  # the gather is written in its reader's layout: no copy back
            if index in copied:
                copy, copied[index] = max(copy, size), 0
            key = (value, tuple(after))
            if gathers and active_rules().all_gather_cse_distance is not None:
                key = self._gathered(values, key, op)
            if key in self._resharded and active_rules().reuses_reshards:
                # an earlier op's reshard made this buffer: the op reads it, not the
                # value (cnn_batchnorm's first relu, all-gathered over ``model`` for
                # the second convolution, dies there; the weight gradient's
                # convolution reads the gathered buffer's copy, transpose_copy_fusion.2)
                self.relaid.add((value, op))
            self._resharded.add(key)
            self.needs.setdefault(op, []).append((key, size, copy))
            read_as[index] = (key, after)
        for index, size in copied.items():
            if size:  # XLA copies it transposed as soon as the operand exists
                value = graph.op_operands[op][index]
                self.needs.setdefault(op, []).append(((value, ("transposed", op, index)), size, 0))
                # and XLA:CPU's kernel reads the copy: the operand's own buffer is not
                # kept for it (conv_net's first relu, read by the second convolution
                # and, copied transposed right after it is computed, by the backward's
                # weight-gradient convolution: transpose_copy_fusion.2 holds it there;
                # XLA:TPU's layouts are ``_copy_per_layout``'s)
                # (a batched dot's copies are not read so: the zoo LMs' attention
                # operands stay live, XLA's YNNPACK dot reading them)
                if name == "stablehlo.convolution" and \
                        not active_rules().copies_operands_per_layout:
                    self.relaid.add((value, op))
        if name in _DOTS:
            self._widen(values, op, operands, results, read_as)
        elif name in ARITHMETIC:
            self._widen_arithmetic(values, op, operands)
        if reduced:
            self.reduced[op] = tuple(sorted(str(a) for a in reduced))
            windowed = name == "stablehlo.dot_general" and active_rules().windowed_reduce_scatter(
                contraction, size_product(reduced), 0) is not None
            self._partial_sums(op, graph.op_results[op], results, reduced, windowed)

    def _replicated(self, graph, op: int, operands, results, mesh) -> list[tuple | None]:
        """What an op XLA's SPMD partitioner has no partitioning for needs
        (``op_comm.xla_replicates``): its ``DefaultAction`` gathers every operand
        whole, runs the op on every device and slices the result, so each operand's
        gather is a buffer (as ``_rule_needs`` gives it) and each sharded result is
        written whole, its slice fused into each reader, and lives as long as they
        read it (``whole``). Seen in XLA:CPU's buffer assignment of an rfft over the
        sequence of a batch-sharded signal: ``all-gather.1 = f32[8,16,64]`` of the
        whole batch, ``fft.24 = c64[8,16,33]`` and its readers' ``partition-id``
        operands."""
        for value, result in zip(graph.op_results[op], results):
            if result.sharding is None:
                continue
            size = shard_bytes(result.shape, result.element_bytes, [()] * len(result.shape))
            if size > shard_bytes(result.shape, result.element_bytes,
                                  dim_axes(result.sharding, len(result.shape))):
                self.whole[value] = size
        wanted: list[tuple | None] = []
        for operand in operands:
            if operand.sharding is None:
                wanted.append(None)
                continue
            rank = len(operand.shape)
            before, after = dim_axes(operand.sharding, rank), [()] * rank
            found = reshard_collectives(operand.shape, operand.element_bytes, operand.sharding,
                                        operand.sharding._replace(dims=tuple(
                                            DimSharding((), True) for _ in range(rank))), mesh)
            if not found:
                wanted.append(None)
                continue
            size = shard_bytes(operand.shape, operand.element_bytes, after)
            wanted.append((after, True, size, _copied(operand, before, after, found), True))
        return wanted

    def _custom_partitioned(self, graph, op: int, operands, mesh, body: bytes,
                            taken: list) -> None:
        """A ``custom_partitioning`` op as XLA partitions it: each operand resharded
        to the sharding its partition rule's body takes (a buffer the op reads), and
        the body inlined (``bodies``, which the liveness walk walks). A result the
        body computes in another sharding is one buffer: the op's, or the body's
        with the op's slice of it fused into its readers (the docs' FFT gathers its
        signals' last axis: XLA:CPU's all-gather, the FFT of the gathered signals,
        and the multiply reading their slice)."""
        for index, (tensor, target) in enumerate(zip(operands, taken)):
            rank = len(tensor.shape)
            after = dim_axes(target, rank)
            if after == dim_axes(tensor.sharding, rank):
                continue
            key = (graph.op_operands[op][index], tuple(after))
            self._resharded.add(key)
            found = reshard_collectives(tensor.shape, tensor.element_bytes, tensor.sharding,
                                        target, mesh)
            self.needs.setdefault(op, []).append(
                (key, shard_bytes(tensor.shape, tensor.element_bytes, after),
                 _copied(tensor, dim_axes(tensor.sharding, rank), after, found)))
        self.bodies[op] = body

    def _indexed(self, graph, op: int, rule, operands, results, mesh
                 ) -> tuple[list, set[str]] | None:
        """What a gather or scatter needs as XLA's gather/scatter handler partitions
        it (``cost.indexed``, as ``comm_report`` prices it), not the factor model:
        per operand None or its reshard (as ``_rule_needs`` gives it), the names of
        the axes its partial results are all-reduced over, and the results it all-to-alls
        (``_exchange``); None where the handler has no plan.

        The handler often looks rows up where the table lies and moves the rows,
        not the table: a lookup in a table sharded over rows and columns gathers
        no table at all on 8 devices (a select of the local rows, an all-reduce of
        f32[4,64,64] and an all-to-all), where the factor model gathered the
        table's rows (a buffer of 256 KiB and its transposed copy).

        Where the plan gathers a table sharded on its looked-up rows and passes the
        indices' sharding on, nothing is summed, though the factor model reads the
        rows' axes as reduced: jraph's node features gathered per edge are
        ``bitcast_gather_fusion = f32[24,1,16]`` of ``all-gather.4`` on 8 devices,
        no all-reduced f32[192,16] of partial lookups."""
        roles = indexed_roles_for(graph.ops[op])
        needs = None if roles is None else indexed_communication(
            rule, roles, operands, results, mesh)
        if needs is None:
            return None
        if active_rules().concatenates_all_to_all:
            self._exchange(graph, op, results, needs)
        wanted: list[tuple | None] = [None] * len(operands)
        for need in needs:
            index = need.operand
            if index is None or need.target is None or index >= len(operands):
                continue
            operand, after = operands[index], list(need.target)
            gathers = need.collective.kind == ALL_GATHER or bool(
                wanted[index] and wanted[index][4])
            size = shard_bytes(operand.shape, operand.element_bytes, after)
            wanted[index] = (after, True, size, 0, gathers)
        if roles.indices < len(wanted) and wanted[roles.indices] is not None:
            # A scatter sliced on its operand's rows reads its indices less each
            # device's offset, written from the resharded indices before it runs (a
            # collective's result fuses into nothing), the resharded ones dead then:
            # the reshard's copy.
            after, moves, size, _, gathers = wanted[roles.indices]
            wanted[roles.indices] = (after, moves, size, adjusted_indices_bytes(
                rule, roles, operands, results, mesh), gathers)
        summed = {name for need in needs if need.operand is None
                  and need.collective.kind == ALL_REDUCE for name in need.collective.axes}
        return wanted, summed

    def _exchange(self, graph, op: int, results, needs) -> None:
        """Record the results XLA's gather/scatter handler computes in another
        sharding and all-to-alls into the declared one (an embedding lookup whose
        rows are looked up over the table's sharding, then moved to the batch's).

        Such a result is a buffer even where its op would fuse into its readers:
        the all-to-all writes it. XLA:CPU's all-to-all sends a tuple of pieces and
        concatenates them along the major dimension; where the dimension the
        pieces make whole has a longer one before it, the concatenated buffer is
        copied into the result's layout, both live while the copy is made (a
        lookup read by a dot: ``concatenate = f32[4,1,64,64]`` of ``all-to-all.1``
        and its copy ``select_bitcast_fusion = f32[64,256]``, the copy the value
        the dots read; at 16 x 16 devices the llama-shaped step's ``concatenate.2``
        of ``all-to-all.2`` and its copy ``copy_bitcast_fusion.29``)."""
        for need in needs:
            if need.operand is not None or need.source is None or (
                    need.collective.kind != ALL_TO_ALL):
                continue
            value, result = graph.op_results[op][0], results[0]
            self.exchanged.add(value)
            declared = dim_axes(result.sharding, len(result.shape))
            old = shard_shape(result.shape, need.source)
            new = shard_shape(result.shape, declared)
            if any(b > a and any(n > 1 for n in new[:dim])
                   for dim, (a, b) in enumerate(zip(old, new))):
                self.extra[op] = self.extra.get(op, 0) + shard_bytes(
                    result.shape, result.element_bytes, declared)

    def _gathered(self, values: ModuleValues, key: tuple, op: int) -> tuple:
        """The buffer op ``op``'s gather of ``key`` (a value and its target) writes:
        the first gather's where XLA:TPU's all-gather CSE makes it the first one
        (``cost.report.reuses_reshard``), else one of its own (``key`` with the op)."""
        if key not in self.gathers:
            note_reshard(values, self.gathers, key, op)
            return key
        if reuses_reshard(values, self.gathers, key, op, ALL_GATHER):
            return key
        return (key[0], (*key[1], ("gathered again by", op)))

    def _widen(self, values: ModuleValues, op: int, operands, results,
               read_as: dict[int, tuple]) -> None:
        """Record the wide buffers of a dot the platform computes in a wider type
        (``PlatformRules.dot_computed_as``): its wide result, live while the dot runs
        (XLA:CPU's ``ynn_fusion`` writes f32, the rounding to bf16 is the next
        fusion's: vit_bf16's ``wrapped_convert`` right after each dot), and one
        converted copy per operand value, shared by every dot reading it (XLA CSEs
        the converts: a llama-shaped step's f32 weights serve the forward and the
        backward dots), unless the operand is already wide: another such dot's
        result, seen through ops that only move it. An operand the dot reads
        resharded (``read_as``) is converted once resharded: the wide copy has the
        reshard's shape, and the narrow reshard is freed once converted (a
        llama-shaped bf16 step's gathered weights: ``convert_convert_fusion.59-77``,
        f32 copies of the all-gathers, live from the forward into the backward)."""
        graph = values.graph
        wide = active_rules().dot_computed_as
        for value, result in zip(graph.op_results[op], results):
            element = wide.get(result.dtype)
            if element:
                self.extra[op] = self.extra.get(op, 0) + shard_bytes(
                    result.shape, element, dim_axes(result.sharding, len(result.shape)))
        for index, operand in enumerate(operands):
            element = wide.get(operand.dtype)
            value = graph.op_operands[op][index]
            if not element or self._computed_wide(graph, value):
                continue
            resharded = read_as.get(index)
            axes = (resharded[1] if resharded else
                    dim_axes(operand.sharding, len(operand.shape)))
            size = shard_bytes(operand.shape, element, axes)
            target = ("widened",) if resharded is None else ("widened", tuple(axes))
            self.needs.setdefault(op, []).append(((value, target), size, 0))
            if resharded is not None:
                self.converted.add(resharded[0])
            else:
                self.widened.add((value, op))
            self._hoist_widened(values, value, element)

    def _widen_arithmetic(self, values: ModuleValues, op: int, operands) -> None:
        """Record the wide copy of a whole loop input an elementwise op in the loop
        body computes on a slice of, on a platform without arithmetic in its type
        (``PlatformRules.arithmetic_computed_as``): XLA:CPU converts a bf16 slice to
        f32 for the op, and the convert of the slice becomes a slice of the whole
        input converted before the loop (the llama-shaped scanned bf16 step's
        backward loop carries six ``wrapped_convert`` f32[2,1,64,256] copies of the
        saved activations its RMS norms and residual adds read, not only those its
        dots read)."""
        wide = active_rules().arithmetic_computed_as
        for index, operand in enumerate(operands):
            element = wide.get(operand.dtype)
            if element:
                self._hoist_widened(values, values.graph.op_operands[op][index], element)

    def _hoist_widened(self, values: ModuleValues, value: int, element: int) -> None:
        """Record the wide copy of a whole loop input a dot in the loop body reads a
        slice of: XLA hoists the loop-invariant convert out of the loop, so a
        scanned step converts each stacked bf16 weight and each stacked saved
        activation to f32 in one buffer, live while the loop runs (the
        llama-shaped scanned step's ``wrapped_convert`` of ``f32[2,1,64,256]``
        before its backward loop)."""
        graph = values.graph
        value = _moved_from(graph, value)
        owner = graph.value_def[value]
        if owner < 0 or graph.op_name[owner] != "stablehlo.dynamic_slice":
            return
        sliced = graph.op_operands[owner][0]
        loop = self._invariant_in(graph, owner, sliced)
        if loop is None or (loop, sliced) in self.hoisted:
            return
        self.hoisted.add((loop, sliced))
        args = graph.op_blocks[loop][1][0]
        outer = graph.op_operands[loop][args.index(sliced)] if sliced in args else sliced
        whole = values.tensor(outer)
        if whole is None or whole.sharding is None:
            return
        axes = dim_axes(whole.sharding, len(whole.shape))
        size = shard_bytes(whole.shape, element, axes)
        if self._computed(graph, outer) and self._only_sliced_in(graph, loop, outer, sliced):
            # A temporary the loop reads only as the wide copy dies at its convert,
            # before the loop: the converts run one after another, the narrow input
            # of the last one live with all the wide copies (the largest counts).
            narrow = shard_bytes(whole.shape, whole.element_bytes, axes)
            kept = self.converted_last.get(loop, 0)
            self.converted_last[loop] = max(kept, narrow)
            size += max(kept, narrow) - kept - narrow
        self.extra[loop] = self.extra.get(loop, 0) + size

    @staticmethod
    def _computed(graph, value: int) -> bool:
        """Whether ``value`` is a buffer the block computes, not an argument seen
        through ops that pass it on unchanged."""
        while graph.value_def[value] >= 0:
            owner = graph.value_def[value]
            if graph.op_name[owner] not in _PASS_ON or not graph.op_operands[owner]:
                return True
            value = graph.op_operands[owner][0]
        return False

    @staticmethod
    def _only_sliced_in(graph, loop: int, outer: int, sliced: int) -> bool:
        """Whether nothing but ``loop`` reads ``outer``, and the loop only slices it
        (``sliced``: ``outer`` itself, read from the enclosing block, or the body's
        argument it enters as)."""
        for user, _ in graph.uses[outer]:
            if user == loop and outer != sliced:
                continue
            inside = user
            while inside >= 0 and inside != loop:
                inside = graph.op_parent[inside]
            if inside != loop:
                return False
        return all(graph.op_name[user] in ("stablehlo.dynamic_slice", "stablehlo.return")
                   for user, _ in graph.uses[sliced])

    @staticmethod
    def _invariant_in(graph, op: int, value: int) -> int | None:
        """The while loop around ``op`` to which ``value`` is loop-invariant: defined
        outside it (a body may read enclosing values) or a body argument the body
        returns unchanged; None if there is no such loop."""
        loop = graph.op_parent[op]
        while loop >= 0 and graph.op_name[loop] != "stablehlo.while":
            loop = graph.op_parent[loop]
        if loop < 0 or len(graph.op_blocks[loop]) < 2:
            return None
        args, ops = graph.op_blocks[loop][1]
        if value in args:
            k = args.index(value)
            returned = graph.op_operands[ops[-1]] if ops else []
            return loop if k < len(returned) and returned[k] == value else None
        inner = graph.value_def[value]
        while inner >= 0 and inner != loop:
            inner = graph.op_parent[inner]
        return None if inner == loop else loop  # else defined outside the loop

    @staticmethod
    def _computed_wide(graph, value: int) -> bool:
        """Whether ``value`` is a dot's result seen through ops that only move it."""
        while graph.value_def[value] >= 0:
            owner = graph.value_def[value]
            name = graph.op_name[owner]
            if name in _DOTS:
                return True
            if name not in _MOVES or not graph.op_operands[owner]:
                return False
            value = graph.op_operands[owner][0]
        return False

    def _partial_sums(self, op: int, values: list[int], results, reduced: set,
                      windowed: bool) -> None:
        """Record the unsliced partial-sum buffers of an op whose result is sharded
        over axes it also reduces over.

        XLA:CPU all-reduces the partial sums at the shape the op computed them in
        (those axes not sharding the result) and slices afterwards, the slice
        fused into each reader (``partition-id`` operands), so the all-reduce's
        full buffer lives as long as the sliced value is read. Seen in
        lm_linen_unconstrained's buffer assignment: the MLP up-projections
        contract over `data` and ``all-reduce.9``/``.19`` (f32[8,16,32], the
        whole batch) live from the forward to the gelu gradient.

        A platform that forms reduce-scatters (XLA:TPU) writes the result's shard
        instead, the partial sums a buffer live only while the op runs, and none at
        all where the dot is reduce-scattered by a windowed loop, which computes the
        shard chunk by chunk (``PlatformRules.windowed_reduce_scatter``): the
        llama-shaped step's output-projection gradient is ``bf16[128,8016]`` in
        XLA:TPU's buffer assignment (``while.274``'s accumulators), never the
        ``[2048,8016]`` partial sums.
        """
        for value, result in zip(values, results):
            axes = dim_axes(result.sharding, len(result.shape))
            if not any(axis in reduced for dim in axes for axis in dim):
                continue
            kept = [[axis for axis in dim if axis not in reduced] for dim in axes]
            partial = shard_bytes(result.shape, result.element_bytes, kept)
            over = sorted(reduced, key=str)
            scatters = all_reduce(result, over, shaped=not windowed).kind == REDUCE_SCATTER
            if not scatters:
                self.partial[value] = partial
                continue
            self.scattered.add(value)
            if not windowed:
                self.extra[op] = self.extra.get(op, 0) + partial


def _moved_from(graph, value: int) -> int:
    """``value`` seen back through ops that only move it, optimization barriers
    included: XLA:CPU expands a barrier into control dependencies before its
    loop-invariant code motion (``OptimizationBarrierExpander``), so a convert of
    a slice behind the barrier ``jax.checkpoint`` puts around a rematerialised
    layer's inputs is hoisted out of the loop all the same (the llama-shaped
    remat step's backward loop: ``wrapped_convert.19``, the saved activations'
    f32[2,1,64,256], and the stacked weights' f32 copies, live while it runs)."""
    while graph.value_def[value] >= 0:
        owner = graph.value_def[value]
        name = graph.op_name[owner]
        if name == "stablehlo.optimization_barrier":
            value = graph.op_operands[owner][graph.op_results[owner].index(value)]
        elif name in _MOVES and graph.op_operands[owner]:
            value = graph.op_operands[owner][0]
        else:
            break
    return value


def _expanded_select_and_scatter(operands) -> int:
    """Bytes of the buffers XLA:CPU's expansion of a select-and-scatter (a max
    pool's gradient) holds while it runs, beyond its operands and result.

    ``SelectAndScatterExpander`` rewrites it as a reduce-window over the operand
    and one s32 iota of the operand's shape per dimension (which element of each
    window was selected), whose results (one of the source's shape per input)
    are concatenated into scatter indices, and a scatter of the source into a
    broadcast of the initial value (the result). Seen in an equinox CNN's
    ``MaxPool2d`` gradient: ``wrapped_iota`` .. ``wrapped_iota.3`` and
    ``wrapped_broadcast.1`` (s32[4,1,16,16,32], one per dimension) live into
    ``wrapped_reduce-window``, whose six results feed
    ``concatenate_bitcast_fusion.1`` and ``wrapped_scatter.1``.
    """
    operand, source = operands[0], operands[1]
    rank = len(operand.shape)
    elements = [prod(shard_shape(t.shape, dim_axes(t.sharding, rank)))
                for t in (operand, source)]
    iotas = rank * elements[0] * _INDEX_BYTES
    windowed = elements[1] * (operand.element_bytes + rank * _INDEX_BYTES)
    return iotas + windowed


def _axes_named(names: set[str], mesh) -> set[AxisRef]:
    """The axes a collective lists as ``names``: whole mesh axes or sub-axes of them."""
    found = set()
    for name, total in mesh.sizes.items() if names else ():
        divisors = [d for d in range(1, total + 1) if total % d == 0]
        for pre in divisors:
            for size in divisors:
                axis = AxisRef(name, pre, size, total)
                if size > 1 and total % (pre * size) == 0 and axis_names((axis,))[0] in names:
                    found.add(axis)
    return found


def _contracted(op, index: int) -> set[int] | None:
    """The dimensions dot ``op`` contracts of its operand ``index`` (None if unread)."""
    try:
        dims = stablehlo.DotDimensionNumbers(op.attributes["dot_dimension_numbers"])
    except (KeyError, ValueError, AttributeError):
        return None
    return set(dims.lhs_contracting_dimensions if index == 0 else dims.rhs_contracting_dimensions)


def _splat(graph, value: int) -> bool:
    """Whether ``value`` is a constant (a scalar broadcast is a splat of it)."""
    owner = graph.value_def[value]
    return owner >= 0 and graph.op_name[owner] in CONSTANTS


def _rule_needs(rule, operands, results, mesh) -> tuple[set, list[tuple | None], int]:
    """What an op of ``rule`` on these operands and results needs: the axes it
    all-reduces over, per operand None (no reshard) or ``(target axes, whether
    data moves, the target's bytes, bytes of a transposed copy of a gather, whether
    it is gathered)``, and the elements it contracts."""
    factor_axes, reduction = computation_axes(rule, operands, results, mesh)
    reduced = {axis for axes in reduction.values() for axis in axes}
    wanted: list[tuple | None] = []
    for index, operand in enumerate(operands):
        needed = required_sharding(rule, index, operand, factor_axes)
        if needed is None:
            wanted.append(None)
            continue
        rank = len(operand.shape)
        before, after = dim_axes(operand.sharding, rank), dim_axes(needed, rank)
        if before == after:
            wanted.append(None)
            continue
        found = reshard_collectives(operand.shape, operand.element_bytes,
                                    operand.sharding, needed, mesh)
        size = shard_bytes(operand.shape, operand.element_bytes, after)
        gathers = any(c.kind == ALL_GATHER for c in found)
        wanted.append((after, bool(found), size, _copied(operand, before, after, found), gathers))
    return reduced, wanted, prod(rule.factor_sizes[f] for f in rule.reduction_factors)


def _relaid_by_reader(graph, op: int, results, gathered: int) -> bool:
    """Whether op ``op`` reads a gather in XLA:CPU's transposed layout as it is.

    XLA's layout assignment gives an all-gather's result the layout its reader
    wants: a transpose (or a reshape read only by transposes) becomes a bitcast
    of it or a fusion reading it, and a reshape whose result is sharded again
    is a fusion of the reshape and each device's slice reading the gathered
    buffer; neither copies the gather back. An einops head split of a
    feature-sharded projection, ``rearrange("b n (three h d) -> three b h n d")``,
    all-gathers into f32[4,16,96]{1,0,2}, read as is by the slices after it;
    its gradient all-gathers f32[4,16,3,4,8]{4,1,0,2,3}, read by
    dynamic-slice_bitcast_fusion's f32[64,24].
    """
    name = graph.op_name[op]
    if name == _TRANSPOSE:
        return True
    if name != _RESHAPE:
        return False
    if results and results[0].sharding is not None and shard_bytes(
            results[0].shape, results[0].element_bytes,
            dim_axes(results[0].sharding, len(results[0].shape))) < gathered:
        return True
    users = [user for result in graph.op_results[op] for user, _ in graph.uses[result]]
    return bool(users) and all(graph.op_name[user] == _TRANSPOSE for user in users)


def _copied(operand, before, after, found) -> int:
    """Bytes of the array a reshard writes before the buffer its reader reads (0 if
    none), live with that reshard's own until the last is written: a gather in a
    transposed layout and its copy back (``layout.transposed_gather``), or the pieces
    an all-to-all receives and concatenates on a platform that concatenates them
    (``PlatformRules.concatenates_all_to_all``: a sequence-sharded attention's keys
    moved to head sharding, ``all-to-all.3``'s eight f32[1,1,32,256] pieces
    concatenated into ``concatenate_bitcast_fusion``, f32[8,32,256])."""
    size = shard_bytes(operand.shape, operand.element_bytes, after)
    if transposed_gather(operand.shape, before, after, found):
        return size
    if active_rules().concatenates_all_to_all and any(c.kind == ALL_TO_ALL for c in found):
        return size
    return 0
