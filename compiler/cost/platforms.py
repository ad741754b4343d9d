"""What XLA does differently per platform, as data: the rules the predictions follow.

``comm_report`` and ``memory_estimate`` were read off XLA:CPU's compiled HLO
and buffer assignment; XLA:TPU (checked ahead of time for a v5e topology's
devices, ``bench/platforms.py``) partitions the same module into the same
collectives but differs in a few measurable ways, each one field here:

* element bytes inside a collective: XLA:CPU runs bf16 collectives in f32
  (4 bytes per element); XLA:TPU keeps bf16 (2 bytes), and gathers the f32
  operands of a (DEFAULT precision) dot in bf16, converted before the gather;
* reduce-scatter: XLA:TPU's reduce-scatter creator turns an all-reduce whose
  result each device then slices (the partial sums of a value sharded over
  axes it was reduced over, e.g. an FSDP weight gradient) into one
  reduce-scatter, counted at its operand as XLA counts it, the all-reduce's
  bytes; XLA:CPU keeps the all-reduce and the dynamic-slice;
* padded reduce-scatter: XLA:TPU's reduce-scatter of a shard scattered on its rows
  runs its all-reduce in equal chunks of whole row tiles per device
  (``reduce_scatter_chunk_tiles``), so a shard may be padded (Llama-3.2-1B's
  embedding gradient over 4 devices: 32064 rows computed as 32112), counted padded,
  and one collective-permute passes the rows each device computed past its own
  shard's end to the next device;
* all-reduce combining: XLA:TPU combines independent all-reduces into one op
  up to ``all_reduce_combine_bytes``, so the count falls and the bytes stay;
  XLA:CPU combines none of a step's gradients in the figures measured, so
  there the count is one per reduction;
* windowed reduce-scatter: XLA:TPU's SPMD partitioner computes a dot whose
  partial sums are reduce-scattered, once its contraction is longer than
  ``windowed_reduce_scatter_above`` elements, as a loop over the n devices of
  the reduced axes (a "windowed einsum", bidirectional, unrolled twice): each
  of n/2 trips computes four chunks of the result and passes each one step
  round the ring (a collective-permute of one device's result shard), and one
  more permute after the loop: 2n + 1 permutes of a 1/n chunk per step, no
  reduce-scatter; a dot in a loop body (a scanned layer) gathers its operand the
  same way (2n + 1 permutes of a 1/n chunk of the gathered operand), where
  unrolled it all-gathers it;
* how many devices: XLA:TPU windows a loop over at most ``windowed_max_devices``
  and more than twice ``windowed_permute_multiplier``
  (a loop body's gather its dot contracts over ``windowed_contracting_devices``), reduce-scatters over at most
  ``reduce_scatter_max_devices`` (over more it all-reduces and slices), and over
  more than that gathers a small shard (``all_gathers_as_all_reduce_below``) by an
  all-reduce of the gathered buffer;
* all-gather reuse: XLA:CPU's partitioner gathers a value once per target
  sharding and every later reader reuses it; XLA:TPU's gathers it for each
  reader and makes a later gather the first one only when the first's readers
  are close to it (``ScheduleAwareCollectiveOpsCSE``, ``all_gather_cse_distance``,
  ``cost.heights``): a train step keeps the gathered weights read last in the
  forward (the output projection, the last layer's MLP) for the backward and
  gathers the others again;
* all-reduce reassociation: the sum of two all-reduced partial sums over the
  same devices (the gradient of an activation read by several dots, e.g.
  Q, K and V) is one all-reduce of the summed partial sums (one reduce-scatter
  where each was reduce-scattered);
* all-reduce code motion: an all-reduce a loop body only adds into a carry (a
  scanned layer's weight gradient) runs once after the loop
  (``hoists_accumulated_all_reduces``);
* vectors: XLA:TPU gathers a vector by an all-reduce of its shard written into
  zeros (``all_gathers_vectors_as_all_reduce``), and an f32 value that only dots
  read, through reshapes, transposes and slices, is gathered in bf16
  (``dot_operands_moved_as``), and a dot's partial sums that only dots read are
  all-reduced in bf16 (``all_reduces_dot_operands_narrow``);
* top_k: XLA:TPU partitions it along its batch dimensions (``partitioned_ops``),
  XLA:CPU gathers its operand whole;
* dots in a wider type: XLA:CPU computes a bf16 dot in f32 (YNNPACK's
  ``ynn_fusion``), its operands converted into f32 buffers and its result
  written in f32 before the next fusion rounds it; XLA:TPU's MXU takes bf16
  (``dot_computed_as``); XLA:CPU's elementwise arithmetic on bf16 is computed in
  f32 too, so a loop body's converted slice of a stacked bf16 input is hoisted
  out of the loop as the whole input converted (``arithmetic_computed_as``);
* buffer layout: XLA:TPU tiles arrays in memory (rank >= 2: two dimensions
  padded to (8, 128) tiles, fewer than 8 rows to a power of two, the two
  that pad least, as XLA picks the layout;
  rank <= 1: padded to a power of two of elements up to ``vector_tile``;
  every buffer, the output tuple's table of pointers too, at least
  ``min_buffer_bytes``), so a small or odd-shaped buffer takes more than its
  elements; XLA:CPU lays arrays out densely.
* fusion and scheduling (the memory estimate's liveness walk): XLA:TPU fuses a
  reduction with its elementwise producers and recomputes an expensive one (exp)
  in each reader, so a softmax's exp and shifted logits are never buffers; it
  recomputes a fusible value in each reader when the buffers it is computed from
  are read until then anyway (attention's probabilities, from the kept scores), and a
  dot's elementwise operand inside every dot reading it where their collectives span
  many devices (the logits' gradient under FSDP over 64 devices or more); it
  fuses a take_along_axis gradient's scatter-add with the zeros it scatters into
  (XLA:CPU fuses a gather with its operand's producer and its readers);
  and its latency-hiding scheduler gathers a weight next to its use, where
  XLA:CPU runs every argument's reshard first.
* buffers (the memory estimate): XLA:TPU reduce-scatters a value's partial sums
  into its shard (``forms_reduce_scatter``; a windowed loop never holds them
  whole), copies a value that dots read in two layouts into the second one when
  it is computed (``copies_operands_per_layout``: a layer's normalised input for
  its weight gradient), and keeps short-lived buffers in on-chip VMEM rather
  than HBM (``on_chip_bytes``, ``explain.on_chip``); a small program's every
  array, where they all fit, its HBM temporaries then the tuple-shaped values of
  that staging and the scalars of reductions' per-element computations
  (``stages_in_vmem``, ``explain.staging``), each tuple a 512-byte table at an
  offset of its own, 16 KiB apart (``heap_alignment``).

``platform_rules(name)`` returns a platform's rules and refuses a platform
the predictions were not validated for (a ``ValueError`` naming those that
were). ``active_rules()`` is the platform a prediction runs under
(``predicting_for``), CPU outside one, so the byte measures deep in the cost
model (``reshard.collective_element_bytes``) read it without every caller
passing it on.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from math import prod

from shardc.compiler.sharding.tensor import Tensor


@dataclass(frozen=True, eq=False)  # one object per platform: memo keys hash it by identity
class PlatformRules:
    """How one XLA backend turns a partitioned module into collectives and buffers."""

    name: str
    # Bytes per element inside a collective, by dtype, where not the dtype's own.
    collective_element_bytes: Mapping[str, int] = field(default_factory=dict)
    # The (element type, bytes) a dot's operands of a type move in when resharded:
    # XLA:TPU runs a DEFAULT-precision f32 dot on bf16 operands and converts them
    # before gathering them (a dot asking for HIGHEST precision would not).
    dot_operands_moved_as: Mapping[str, tuple[str, int]] = field(default_factory=dict)
    # Whether a dot's partial sums that only dots read are all-reduced as those dots'
    # operands move (``dot_operands_moved_as``): XLA:TPU moves the operands' convert
    # above the all-reduce and sums in the narrower type.
    all_reduces_dot_operands_narrow: bool = False
    # Whether an all-reduce followed by a slice of its result becomes a reduce-scatter.
    forms_reduce_scatter: bool = False
    # The most devices such a reduce-scatter spans (0: any); over more, the all-reduce
    # and the slice stay.
    reduce_scatter_max_devices: int = 0
    # XLA:TPU forms the reduce-scatter (its all-reduce-scatter fusion) of a result
    # shard only where the largest prime factor of its minor dimension (the last one it
    # is not scattered on, as the fusion lays it out: scattered dimensions major), in
    # tiles of ``tile[1]`` elements, times the devices is at most this (0: any); else
    # the all-reduce and the slice stay.
    reduce_scatter_tile_factor: int = 0
    # XLA:TPU forms that fusion only for a shard of at least this many (``tile``) tiles
    # that is scattered on one of its two minor dimensions (0: any shard): rank 2, the
    # scattered dimension as the tiles' rows (a whole tile of rows at least) and the
    # other as their columns; rank 3 or more, those two laid out as the shard pads
    # least, the scattered one as the tiles' rows in whole tiles (the tiles counted
    # over the major dimensions too), as the minor one only in whole columns of tiles.
    # Never a vector, nor a shard scattered on a major dimension; other shards'
    # all-reduce and slice stay.
    reduce_scatter_min_tiles: int = 0
    # XLA:TPU's reduce-scatter (the all-reduce-scatter fusion) of a result scattered on
    # its rows (the shard's second-minor dimension, in tiles of ``tile[0]`` rows of 32-bit
    # words) runs its all-reduce in chunks of at most this many row tiles per device,
    # by devices in the group (a larger group: the entry of the largest measured size
    # it holds): each device's shard is a whole number of tiles per chunk, the chunks
    # equal, so a shard is padded up to that (``reduce_scatter_rows``), and the rows
    # each device then lacks of its declared shard come from its neighbour by one
    # collective-permute (empty: never padded).
    reduce_scatter_chunk_tiles: Mapping[int, int] = field(default_factory=dict)
    # Over more devices than ``reduce_scatter_max_devices``, an all-gather of a shard
    # of at most this many bytes is an all-reduce of the gathered buffer, each device's
    # shard written into zeros (0: never): the same bytes, another kind.
    all_gathers_as_all_reduce_below: int = 0
    # Whether an all-gather of a vector (rank 0 or 1) whose shard is less than one
    # ``tile[1]``-element tile is such an all-reduce over any number of devices: XLA:TPU
    # gathers an array along the dimension it lays out major-most, which a vector's
    # one dimension is only in tiles of 128 elements (every vector gather of the libzoo
    # compiles, shards of 8 to 64 elements; larger shards were not compiled).
    all_gathers_vectors_as_all_reduce: bool = False
    # Whether an operand resharded for one op is reused by later ops that need it so
    # (XLA:CPU's partitioner keeps it; XLA:TPU gathers again, e.g. a weight in the
    # backward pass, rather than hold the gathered copy).
    reuses_reshards: bool = True
    # XLA:TPU's all-gathers besides: one per reading op, the later made the first
    # where they are close (``ScheduleAwareCollectiveOpsCSE`` with this threshold,
    # ``cost.heights``; None: no such rule), so a weight read last in the forward
    # keeps its gathered copy for the backward and the others are gathered again.
    all_gather_cse_distance: int | None = None
    # A dot whose partial sums are reduce-scattered runs as a windowed loop of
    # collective-permutes once its contraction has more elements than this (0: never).
    windowed_reduce_scatter_above: int = 0
    # Whether a dot in a loop body gathers its operand by a windowed loop of
    # collective-permutes instead of an all-gather.
    windows_loop_all_gathers: bool = False
    # The most devices a windowed loop runs over (one trip per device; 0: any): a dot
    # over more reduce-scatters or all-gathers its operand whole (XLA's
    # ``max_windowed_einsum_iteration``).
    windowed_max_devices: int = 0
    # The fewest and the most devices a loop body's windowed gather runs over where the
    # dot contracts the gathered dimension (0: ``windowed_max_devices``); over fewer or
    # more it all-gathers (XLA's check that the loop's permutes and the dot's compute
    # take less time than the all-gather and the dot, priced for the device group).
    windowed_contracting_devices: tuple[int, int] = (0, 0)
    # How much slower a windowed loop's collective-permutes move a collective's bytes
    # than the all-gather or reduce-scatter they replace (XLA's
    # ``GetCommunicationMultiplier``, m). XLA's partitioner keeps the collective whole
    # where max(compute, m * comm) plus the loop's extra permute, 2 * m * comm / n over
    # n devices, is no faster than compute + comm: always over at most 2 * m devices,
    # however long the dot's compute (0: no such bound).
    windowed_permute_multiplier: float = 0.0
    # Whether an all-reduce in a loop body whose result is only added into a carry (a
    # scanned layer's weight gradient summed over the steps) runs once after the loop,
    # of the summed partial sums (XLA's ``WhileLoopAllReduceCodeMotion``).
    hoists_accumulated_all_reduces: bool = False
    # Whether the sum of two all-reduces over the same devices is one all-reduce.
    reassociates_all_reduces: bool = False
    # Independent all-reduces over the same devices are combined up to this many
    # bytes per combined op (0: never combined).
    all_reduce_combine_bytes: int = 0
    # In-memory tiling: (second-minor, minor) tile of arrays of rank >= 2, the
    # largest tile of elements of rank-0/1 arrays, the smallest buffer (None: dense).
    tile: tuple[int, int] | None = None
    vector_tile: int = 1
    min_buffer_bytes: int = 0
    # Element types whose dots the backend computes wider, and the bytes per element
    # it computes them in: each operand converted into a wide buffer (one per value,
    # kept for every dot reading it), the result wide while the dot runs.
    dot_computed_as: Mapping[str, int] = field(default_factory=dict)
    # Element types the backend has no arithmetic for, and the bytes per element it
    # computes elementwise ops on them in (XLA:CPU's float normalization converts a
    # bf16 add or multiply to f32 and back): a loop body's slice of a loop-invariant
    # input so computed is converted whole, outside the loop.
    arithmetic_computed_as: Mapping[str, int] = field(default_factory=dict)
    # From how many input elements per device an f32 sum, max or min is a custom
    # fusion of its own (XLA:CPU's YNNPACK reductions; 0: never), whose chain's
    # inputs are then buffers rather than recomputed.
    offloaded_reduction_elements: int = 0
    # The alignment of each temporary's offset in the heap XLA packs them into.
    heap_alignment: int = 1
    # Ops of ``op_comm.XLA_REPLICATED_OPS`` the platform partitions by their sharding
    # rule (the batch dimensions kept sharded): XLA:TPU runs ``chlo.top_k`` as its TopK
    # custom call, which its SPMD partitioner partitions; XLA:CPU sorts, every operand
    # gathered.
    partitioned_ops: frozenset[str] = frozenset()
    # Whether a fusible value read by several fusing ops (a reduction among them, or
    # an expensive one such as exp) is fused into each of them rather than kept as a
    # buffer: XLA:TPU fuses a reduction with its elementwise producers and recomputes
    # exp in each consumer (a softmax's exp and shifted logits are never buffers);
    # XLA:CPU keeps such a value.
    duplicates_shared_producers: bool = False
    # Ops fusible on this platform besides elementwise ops, broadcasts, slices and such
    # (``cost.fusion.FUSIBLE``), as producers and as consumers: XLA:TPU rewrites a
    # scatter-add into zeros of one update per row (a take_along_axis's gradient)
    # into a select of a one-hot compare and fuses it with the zeros and its reader,
    # so neither the zeros nor the scattered values are a buffer.
    fusible: frozenset[str] = frozenset()
    # Whether the scheduler runs the reshard of an argument (a weight's all-gather)
    # first thing, its buffer live from the block's start (XLA:CPU), or close to its
    # first consumer (XLA:TPU's latency-hiding scheduler overlaps each gather with
    # the compute just before its use).
    reshards_arguments_first: bool = True
    # Whether an all-to-all writes its pieces as a tuple concatenated along the major
    # dimension (XLA:CPU's decomposition of an array all-to-all), so an op's result
    # moved by one is that concatenated buffer, and a copy into the result's layout
    # where the dimension it makes whole is not the major one (``OpNeeds.exchanged``);
    # XLA:TPU's all-to-all writes the result in place.
    concatenates_all_to_all: bool = False
    # Whether the array a halo exchange concatenates (a slice of a dimension sharded in
    # its operand and result: the neighbours' halos and the shard's own part) is a
    # buffer its readers read their shard of, not fused into them (XLA:CPU emits a
    # concatenate as a kernel of its own: ``concatenate.12`` of a PaLM-like MLP's
    # ``jnp.split``, live from the forward's silu to the backward's; never validated
    # against XLA:TPU's fusion).
    writes_halo_windows: bool = False
    # Whether a fusible value computed from buffers that are read until its last
    # reader anyway is recomputed in each reader instead of kept: XLA:TPU fuses it
    # into its consumers (a dot's operand too), e.g. attention's probabilities,
    # recomputed for the backward from the kept scores.
    recomputes_fused_values: bool = False
    # From how many devices a dot's collective (its other operand's gather, its partial
    # sums' reduction) spans, a fusible value read only by such dots is computed inside
    # each of them instead of written to a buffer (0: never; XLA:TPU's convolution
    # fusion of a dot's elementwise operand, ``LivenessWalker.fused_into_dots``).
    dot_operand_fusion_devices: int = 0
    # Whether a value dots read in two layouts (one contracting its last dimension,
    # another others: a layer's normalised input, read by the forward dot and the
    # weight gradient's) is copied into the second layout when computed, the copy
    # live until its last such reader (XLA:TPU's layout assignment).
    copies_operands_per_layout: bool = False
    # Bytes of on-chip memory the backend keeps short-lived temporaries in instead of
    # HBM (0: none; ``explain.on_chip``): XLA:TPU's memory-space assignment uses up
    # to 112 MiB of a v5e core's 128 MiB of VMEM.
    on_chip_bytes: int = 0
    # Bytes per element of the table of pointers an op with several results writes
    # (0: none): XLA:CPU and XLA:TPU give each tuple-shaped value (a while loop's
    # carries, a custom call's or a combined all-reduce's results) a buffer of one
    # 8-byte pointer per element (``table_bytes``: laid out as any buffer), live while
    # any element is read.
    tuple_pointer_bytes: int = 0
    # Whether the backend stages a small program's arrays through on-chip memory
    # (``explain.staging``): XLA:TPU holds every array in VMEM where they all fit, and
    # what stays in HBM is the tuple-shaped values of that staging (each argument's
    # prefetch, each multi-output fusion) and the scalars of each reduction's
    # per-element computation.
    stages_in_vmem: bool = False
    # Whether a select-and-scatter (a max pool's gradient) is expanded into a
    # reduce-window over one s32 iota per dimension and a scatter (XLA:CPU's
    # ``SelectAndScatterExpander``), whose index buffers live while it runs.
    expands_select_and_scatter: bool = False
    # Whether a convolution with a batch group count G > 1 (a grouped or depthwise
    # convolution's kernel gradient) runs as one dense convolution over all G groups'
    # features and its diagonal blocks are kept (XLA:CPU's ``ConvolutionGroupConverter``
    # with ``convert_batch_groups_only``): G times the grouped one's operations.
    expands_batch_group_convolutions: bool = False
    # Whether a cheap fusible value some ops cannot fuse (a convolution, a dot)
    # is kept for them only and computed again inside each op that can fuse it
    # (XLA:CPU's fusion duplicates a producer reading one large operand into every
    # fusing consumer: a ReLU's output lives until the next convolution, its
    # gradient recomputes it from the convolution output before it).
    duplicates_cheap_producers: bool = False
    # The most copies of a producer's code one fused kernel may emit (0: no limit):
    # a fusible value its kernel reads through more distinct index computations
    # (slices, pads, broadcasts, reshapes of it, each level of a tree of them
    # multiplying) is a buffer of its own. XLA:CPU's fusion stops there
    # (``FusionNodeIndexingEvaluation::kAllowedCodeDuplication``, 15).
    fused_code_copies: int = 0
    # Whether the compiler removes optimization barriers before its CSE (XLA:CPU's
    # ``OptimizationBarrierExpander``), so that ``jax.checkpoint``'s recomputation of
    # an unrolled layer merges into the forward's ops and the forward's values live
    # on into the backward (``explain.merged``).
    expands_optimization_barriers: bool = False

    def table_bytes(self, count: int) -> int:
        """Bytes of the table of pointers of a tuple of ``count`` elements, laid out as
        the platform lays out a buffer (0 where it writes none)."""
        if not self.tuple_pointer_bytes or not count:
            return 0
        return self.buffer_bytes((count,), self.tuple_pointer_bytes)

    def element_bytes_in_collective(self, element_bytes: int, dtype: str | None) -> int:
        """Bytes one element of ``dtype`` takes inside a collective."""
        return self.collective_element_bytes.get(dtype, element_bytes)

    def windowed_reduce_scatter(self, contraction: int, devices: int,
                                operand_bytes: int) -> int | None:
        """Bytes per device per step of the collective-permutes of a windowed
        reduce-scatter of ``operand_bytes`` over ``devices`` for a dot contracting
        ``contraction`` elements; None where the platform reduce-scatters it whole."""
        if not self.windowed_reduce_scatter_above or contraction <= self.windowed_reduce_scatter_above \
                or not self.windows_over(devices):
            return None
        return windowed_bytes(devices, operand_bytes)

    def scatters_over(self, devices: int, shard: Sequence[int] | None = None,
                      scattered: Sequence[int] = ()) -> bool:
        """Whether an all-reduce over ``devices`` devices whose result is sliced is a
        reduce-scatter (``forms_reduce_scatter``, ``reduce_scatter_max_devices``); given
        the result's ``shard`` (per-device shape) and the dimensions it is
        ``scattered`` on, also whether the platform forms it for that shape
        (``reduce_scatter_min_tiles``, ``reduce_scatter_tile_factor``)."""
        if not self.forms_reduce_scatter or (self.reduce_scatter_max_devices
                                             and devices > self.reduce_scatter_max_devices):
            return False
        if shard is None:
            return True
        if not self._scatters_shard(shard, scattered):
            return False
        if not self.reduce_scatter_tile_factor or self.tile is None:
            return True
        minor = next((n for k, n in reversed(list(enumerate(shard))) if k not in scattered), 1)
        tiles = -(-minor // self.tile[1])
        return largest_prime_factor(tiles) * devices <= self.reduce_scatter_tile_factor

    def _scatters_shard(self, shard: Sequence[int], scattered: Sequence[int]) -> bool:
        """Whether the platform's reduce-scatter takes a shard of this shape scattered on
        these dimensions (``reduce_scatter_min_tiles``)."""
        if not self.reduce_scatter_min_tiles or self.tile is None or len(scattered) != 1:
            return True
        [dim], rank = scattered, len(shard)
        if rank < 2 or dim < rank - 2:
            return False
        if rank == 2:
            rows, cols = shard[dim], shard[1 - dim]
            tiles = -(-rows // self.tile[0]) * -(-cols // self.tile[1])
            return rows >= self.tile[0] and tiles >= self.reduce_scatter_min_tiles
        # Of rank 3 or more, the shard's two minor dimensions are tiled as XLA:TPU lays
        # the shard out: the one that pads less as the tiles' rows (the second-minor on
        # a tie), so a dot's [2, 17, 16] partial sums scattered on 16 are laid out
        # {1,2,0}, 16 rows of 17 columns.
        minor = rank - 2 if self._tiled(shard, rank - 1, rank - 2) \
            < self._tiled(shard, rank - 2, rank - 1) else rank - 1
        if dim == minor:
            return shard[dim] % self.tile[1] == 0
        rows, cols = shard[dim], shard[minor]
        tiles = prod(shard[:-2]) * (rows // self.tile[0]) * -(-cols // self.tile[1])
        return rows % self.tile[0] == 0 and tiles >= self.reduce_scatter_min_tiles

    def reduce_scatter_rows(self, rows: int, devices: int, element_bytes: int) -> int:
        """Rows per device XLA:TPU's reduce-scatter over ``devices`` computes for a shard
        of ``rows`` rows of ``element_bytes`` elements (``reduce_scatter_chunk_tiles``):
        ``rows`` where it needs no padding."""
        chunk = self.reduce_scatter_chunk_tiles.get(
            max((size for size in self.reduce_scatter_chunk_tiles if size <= devices),
                default=0), 0)
        if not chunk or self.tile is None:
            return rows
        tile_rows = self.tile[0] * max(4 // element_bytes, 1)
        tiles = -(-rows // tile_rows)
        chunks = -(-tiles // chunk)
        return max(rows, _round_up(tiles, chunks) * tile_rows)

    def gathers_by_all_reduce(self, devices: int, gathered_bytes: int, rank: int = 2,
                              element_bytes: int = 4) -> bool:
        """Whether an all-gather over ``devices`` devices of ``gathered_bytes`` (its
        result, of ``rank`` dimensions of ``element_bytes`` elements) runs as an
        all-reduce (``all_gathers_as_all_reduce_below``,
        ``all_gathers_vectors_as_all_reduce``)."""
        if (self.all_gathers_vectors_as_all_reduce and rank <= 1 and self.tile is not None
                and gathered_bytes // max(element_bytes, 1) < devices * self.tile[1]):
            return True
        return (bool(self.all_gathers_as_all_reduce_below) and bool(self.reduce_scatter_max_devices)
                and devices > self.reduce_scatter_max_devices
                and gathered_bytes <= self.all_gathers_as_all_reduce_below * devices)

    def windows_over(self, devices: int, contracting: bool = False) -> bool:
        """Whether a windowed loop may run over ``devices`` devices (``contracting``:
        a gather of the dimension its dot contracts)."""
        fewest, most = self.windowed_contracting_devices if contracting else (0, 0)
        limit = most or self.windowed_max_devices
        return (devices >= max(fewest, 2) and devices > 2 * self.windowed_permute_multiplier
                and (not limit or devices <= limit))

    def dot_operand(self, tensor: Tensor) -> Tensor:
        """A dot's operand as the platform moves it (``dot_operands_moved_as``)."""
        moved = self.dot_operands_moved_as.get(tensor.dtype)
        if moved is None:
            return tensor
        return replace(tensor, dtype=moved[0], element_bytes=moved[1])

    def buffer_bytes(self, shape: Sequence[int], element_bytes: int) -> int:
        """Bytes of one buffer of ``shape`` as the platform lays it out in memory."""
        if self.tile is None:
            return element_bytes * prod(shape)
        if len(shape) >= 2:
            # XLA:TPU picks the layout (which dimensions are tiled) that pads least,
            # e.g. a [512, 64] shard keeps 64 as its rows, not its 128-wide columns.
            elements = min(self._tiled(shape, second, minor)
                           for second in range(len(shape)) for minor in range(len(shape))
                           if second != minor)
        else:
            n = shape[0] if shape else 1
            elements = (_round_up(n, self.vector_tile) if n > self.vector_tile
                        else _power_of_two(n))
        return max(elements * element_bytes, self.min_buffer_bytes)


    def _tiled(self, shape: Sequence[int], second: int, minor: int) -> int:
        """Elements of ``shape`` tiled with dimension ``second`` as the tile's rows
        (fewer rows than a tile's: the next power of two) and ``minor`` as its columns."""
        rows, cols = self.tile
        n = shape[second]
        tiled = (_round_up(n, rows) if n >= rows else _power_of_two(n)) \
            * _round_up(shape[minor], cols)
        return tiled * prod(d for k, d in enumerate(shape) if k not in (second, minor))


def windowed_bytes(devices: int, gathered_bytes: int) -> int:
    """Bytes per device per step of XLA:TPU's windowed einsum over ``devices``
    (bidirectional, unrolled twice): 2n + 1 collective-permutes of a 1/n chunk of
    the gathered operand or the reduce-scattered result."""
    return (2 * devices + 1) * (gathered_bytes // devices)


def largest_prime_factor(n: int) -> int:
    """The largest prime factor of ``n`` (1 for 1)."""
    largest, p = 1, 2
    while p * p <= n:
        while n % p == 0:
            largest, n = p, n // p
        p += 1
    return max(largest, n) if n > 1 else largest


def _round_up(n: int, multiple: int) -> int:
    return -(-n // multiple) * multiple


def _power_of_two(n: int) -> int:
    return 1 << max(n - 1, 0).bit_length()


# XLA:CPU's YNNPACK reduction threshold, probed on jaxlib 0.10.2: 4095 elements
# stay a loop fusion.
CPU = PlatformRules("cpu", collective_element_bytes={"bf16": 4}, dot_computed_as={"bf16": 4},
                    arithmetic_computed_as={"bf16": 4},
                    offloaded_reduction_elements=4096, heap_alignment=64,
                    fusible=frozenset({"stablehlo.gather"}), tuple_pointer_bytes=8,
                    expands_select_and_scatter=True, duplicates_cheap_producers=True,
                    fused_code_copies=15,
                    concatenates_all_to_all=True, expands_optimization_barriers=True,
                    expands_batch_group_convolutions=True, writes_halo_windows=True)
# The combine threshold is XLA:TPU's default all-reduce combiner size (the
# step's gradients of the bench's programs combine into one op per device group).
# The windowed reduce-scatter's threshold: XLA:TPU v5e compiles (16x16 and 4x4
# meshes) reduce-scatter a dot contracting 4096 elements and window one contracting 4224.
# The all-gather CSE's threshold is libtpu's ``xla_tpu_spmd_threshold_for_allgather_cse``
# (its compile environment's dump, ``tpu_comp_env.txt``, for v5e). The windowed loops'
# devices are XLA's default ``max_windowed_einsum_iteration``: on v5e 16x16 an FSDP x
# TP weight gradient (x.T @ dy onto ("data", "model")) reduce-scattered over 16 or 32
# devices of "data" is windowed, over 64 or 128 it is not, however long the
# contraction; in a loop body (scanned layers, 7b at 32x8 and 8x32) it windows the
# backward's gathers over 32 or 8 devices (the weight's gathered rows not contracted:
# dx = dy @ w.T) and all-gathers the forward's (x @ w contracts them), over 16 (1b and
# 7b at 16x16) it windows both.
# The permutes' multiplier is XLA's default, 1, the least it is (libtpu's
# windowed-einsum size threshold is -1 MiB, so only that time check decides): on v5e
# 2x4 a dot over the 2 devices of an axis all-gathers its operand in a loop body and
# reduce-scatters its partial sums however long its compute against the collective (a
# scanned [8, 512, 16384] by [8, 512, 256] weight gradient; a 262144-long contraction
# into [256, 512]), while over a line of 4 chips (a 65536-long contraction's
# reduce-scatter) and all 8 (a scanned [4, 512, 32768] by [4, 512, 128] one's gather)
# it windows them. Over a 2x2 block of chips it windowed neither, so XLA:TPU's
# multiplier depends on the chips a group spans (not modelled: over 4 devices the
# loops stay windowed). Not modelled either: XLA windows a collective too small to
# time (its time check needs over 1e-5 ms), as a [4, 16] shard's gather over 2 devices.
# The reduce-scatters' devices: there a weight gradient's partial sums
# over 128 devices are reduce-scattered (and over 128 of v5e 8x16), over all 256
# all-reduced and sliced (pure FSDP); and over all 256 a weight's all-gather of a
# 32 or 64 KiB shard (bf16[8, 2048] or [8, 4096]) is an all-reduce of
# dynamic-update-slices into zeros, of a 96 or 128 KiB one an all-gather (over 128
# devices, all-gathers from 8 KiB shards up).
# Which sliced all-reduces become reduce-scatters besides (a sum over "data" of n
# devices into a result sharded on its rows over them, v5e 16x16): it depends on n and
# on the columns of the result shard in 128-wide tiles, k, not on its element type,
# and the largest prime factor of k times n at most 1664 separates nearly every
# compile measured: over 64 devices every k up to 28 and 30 (and 240, 250, 126) forms,
# 29, 31, 37, ..., 47, 58, 232, 248 and 251 (the 1b output projection's [32, 32064])
# do not; over 128 (16 rows a device) k = 3 to 14, 16, 18, 21, 22 and 27 form, 17,
# 19, 23, 29 and 43 (the 7b MLP's [32, 5504]) do not, nor 15, 25 and 125 at 16 rows
# (125 forms at 32 rows: the 7b output projection's [32, 16000]); over 32, 47 and 63
# form, 61 and 67 do not; over 16, 61 and 67 form, 127 does not (nor 97). A result
# scattered on its columns is laid out columns-major, its rows the minor dimension
# ([2048, 3712] sharded on 3712 over 64: formed; [3712, 2048] on 2048: not).
# The shards it forms one for: a sum over n = 2, 4 or 8 devices of v5e 2x4 into a result
# scattered on its rows or its columns, f32 or bf16: [8, 256], [12, 128] (padded to 16
# rows), [16, 128] and [128, 16] form, [4, c] for c up to 8192, [8, 128] and [128, 8]
# do not (the libzoo's FSDP steps: adafactor's [4, 128] weight-gradient shards over 8
# devices are all-reduced and sliced); of rank 3, [2, 16, 16] and [2, 8, 256] scattered
# on the middle dimension and [2, 32, 128] on the last form, [2, 16, 16] and [4, 32, 32]
# on the last and [16, 2, 16] on the first do not; vectors of 16 to 8192 elements never.
# Of rank 3, the layout decides: a dot's [b, s, f] partial sums (b = 1, 2, 4, 8; s = 8,
# 16, 17, 32; f = 4 to 32 a device over 4 or 8 devices) scattered on f are laid out f
# as rows where that pads less ({1,2,0}: s = 16 and f = 8, s = 17 and f = 16) and form
# from two tiles of whole rows ([2, 16, 8] forms, [1, 16, 8] and [2, 16, 4] do not);
# scattered on s (b = 1, 2, 4; s = 4 to 32, f = 4 to 256 over 4), s as rows where that
# pads no more than f would, in whole tiles ([2, 8, 8] and [1, 16, 16] form, [2, 16, 8],
# [2, 17, 32] and [4, 17, 256] do not); 217 of those 218 compiles so (not [1, 17, 256]).
# The reduce-scatter's chunks: a scatter-add's [n x rows, 32] partial sums scattered on
# the rows over n devices of "model" (v5e 16x16, n = 2 to 32; the same for 16 to 256
# columns): the shard each computes is k ceil(t / k) tiles of 16 bf16 rows, t its
# tiles, k = ceil(t / chunk) with one chunk size per group size that fits every compile
# (over 2 devices between 301 and 308 tiles, 4: 223 to 233, 8: 151 to 166, 16: 63 to
# 71; over 32 as over 16 in the two measured).
TPU = PlatformRules("tpu", dot_operands_moved_as={"f32": ("bf16", 2)}, reuses_reshards=False,
                    all_reduces_dot_operands_narrow=True,
                    all_gather_cse_distance=100,
                    forms_reduce_scatter=True, reduce_scatter_max_devices=128,
                    reduce_scatter_tile_factor=1664, reduce_scatter_min_tiles=2,
                    reduce_scatter_chunk_tiles={2: 304, 4: 228, 8: 158, 16: 64},
                    all_gathers_as_all_reduce_below=64 << 10,
                    all_gathers_vectors_as_all_reduce=True,
                    all_reduce_combine_bytes=256 << 20,
                    windowed_reduce_scatter_above=4096, windows_loop_all_gathers=True,
                    windowed_max_devices=32, windowed_contracting_devices=(16, 16),
                    windowed_permute_multiplier=1,
                    reassociates_all_reduces=True, hoists_accumulated_all_reduces=True,
                    tile=(8, 128), vector_tile=1024, min_buffer_bytes=512,
                    duplicates_shared_producers=True,
                    fusible=frozenset({"stablehlo.scatter"}),
                    partitioned_ops=frozenset({"chlo.top_k"}),
                    reshards_arguments_first=False, recomputes_fused_values=True,
                    dot_operand_fusion_devices=64,
                    copies_operands_per_layout=True, on_chip_bytes=112 << 20,
                    heap_alignment=16 << 10, tuple_pointer_bytes=8, stages_in_vmem=True)

PLATFORMS: dict[str, PlatformRules] = {rules.name: rules for rules in (CPU, TPU)}
# XLA:GPU as the step-time model assumes it partitions (never validated against its
# compiled HLO, hence not in ``PLATFORMS``): bf16 collectives in bf16, an all-reduce
# of partial sums that each device then slices made a reduce-scatter.
GPU = PlatformRules("gpu", forms_reduce_scatter=True)


@dataclass(frozen=True)
class Hardware:
    """One device kind's speeds and sizes, for the step-time model
    (``cost.step_time``; ``docs/step-time-model.md`` gives each figure's source).

    A mesh's minor axes (last in the mesh, as ``jax.make_mesh`` lays devices
    out) run over the fast interconnect while their device count fits in
    ``fast_group`` devices; an axis past that runs over ``slow_bandwidth``.
    """

    name: str
    rules: PlatformRules  # how XLA partitions for it: the collectives and their bytes
    # Peak dense matrix-unit operations per second by element type of the result;
    # other types run at the ``"f32"`` figure.
    matmul_flops: Mapping[str, float]
    vector_flops: float  # elementwise and reduction operations per second
    memory_bandwidth: float  # bytes/s between the device and its own memory
    memory_bytes: int  # device memory (HBM; host RAM per device for CPU)
    link_bandwidth: float  # bytes/s one device sends over the fast interconnect
    fast_group: int  # devices the fast interconnect joins (an ICI slice, an NVLink node)
    slow_bandwidth: float  # bytes/s per device between fast groups (data-centre network)
    latency_s: float  # fixed cost of one collective (launch and synchronisation)

    def matmul_rate(self, dtype: str) -> float:
        """Peak matrix operations per second for results of ``dtype``."""
        return self.matmul_flops.get(dtype, self.matmul_flops["f32"])


_GB = 1e9
HARDWARE: dict[str, Hardware] = {hw.name: hw for hw in (
    # One x86 core (AVX2: 2 FMA units x 8 f32 lanes x 2 operations x 3 GHz) per
    # host device; collectives are memory copies between threads of one process.
    Hardware("cpu", CPU, matmul_flops={"f32": 96e9, "bf16": 48e9}, vector_flops=48e9,
             memory_bandwidth=20 * _GB, memory_bytes=16 << 30, link_bandwidth=10 * _GB, fast_group=1 << 30,
             slow_bandwidth=10 * _GB, latency_s=20e-6),
    # TPU v5e: 197 TFLOP/s bf16 (f32 dots run as bf16 at DEFAULT precision), 16 GiB
    # HBM, 1600 Gbit/s of ICI per chip in a 2D torus of up to 256 chips.
    Hardware("tpu v5e", TPU, matmul_flops={"bf16": 197e12, "f32": 197e12},
             vector_flops=197e12 / 16, memory_bandwidth=819 * _GB,
             memory_bytes=16 << 30, link_bandwidth=200 * _GB,
             fast_group=256, slow_bandwidth=25 * _GB, latency_s=5e-6),
    # H100 SXM: 989 TFLOP/s dense bf16, 495 TF32 (f32 dots at DEFAULT precision), 67
    # f32 vector; 80 GB HBM3; NVLink 4 at 450 GB/s per direction within an 8-GPU
    # node, one 400 Gbit/s network adapter per GPU between nodes.
    Hardware("gpu h100", GPU, matmul_flops={"bf16": 989e12, "f16": 989e12, "f32": 495e12},
             vector_flops=67e12, memory_bandwidth=3350 * _GB,
             memory_bytes=80 * 10**9, link_bandwidth=450 * _GB,
             fast_group=8, slow_bandwidth=50 * _GB, latency_s=10e-6),
)}
# What ``hardware(name)`` also accepts: jax's platform names and short forms.
_HARDWARE_ALIASES = {"tpu": "tpu v5e", "v5e": "tpu v5e", "gpu": "gpu h100",
                     "cuda": "gpu h100", "h100": "gpu h100"}


def hardware(name: str) -> Hardware:
    """The device kind ``name`` ("cpu", "tpu"/"tpu v5e", "gpu"/"gpu h100"); a
    ``ValueError`` naming those for any other."""
    key = name.lower() if isinstance(name, str) else name
    found = HARDWARE.get(_HARDWARE_ALIASES.get(key, key))
    if found is None:
        raise ValueError(f"shardc models step time for {sorted(HARDWARE)} "
                         f"(or {sorted(_HARDWARE_ALIASES)}), not {name!r}")
    return found


def platform_rules(platform: str) -> PlatformRules:
    """The rules of ``platform`` ("cpu", "tpu"); a ``ValueError`` for any other."""
    rules = PLATFORMS.get(platform.lower() if isinstance(platform, str) else platform)
    if rules is None:
        raise ValueError(
            f"shardc predicts communication and memory for platforms {sorted(PLATFORMS)}, "
            f"not {platform!r}: XLA's other backends were not validated against")
    return rules


_ACTIVE: contextvars.ContextVar[PlatformRules] = contextvars.ContextVar(
    "shardc_platform_rules", default=CPU)


def active_rules() -> PlatformRules:
    """The rules of the prediction running now (CPU outside any)."""
    return _ACTIVE.get()


@contextlib.contextmanager
def predicting_for(rules: PlatformRules) -> Iterator[PlatformRules]:
    """Run a prediction under ``rules`` (restored after, also on error)."""
    token = _ACTIVE.set(rules)
    try:
        yield rules
    finally:
        _ACTIVE.reset(token)


__all__ = ["CPU", "GPU", "HARDWARE", "PLATFORMS", "TPU", "Hardware", "PlatformRules",
           "active_rules", "hardware", "platform_rules", "predicting_for", "windowed_bytes"]
