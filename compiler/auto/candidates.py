"""What an AUTO argument may be sharded as, and which arguments share one choice.

``candidates(shape, axes)``: every assignment of whole mesh axes to the
argument's dimensions that divides them, each axis used at most once and at
most two dimensions sharded: replicated; one axis on one dimension (data
parallel or FSDP on the data axis, tensor parallel on the model axis); two
axes on two dimensions (FSDP x tensor parallel); several axes on one
dimension (the batch over the whole mesh). Closed, so propagation cannot
move them, in the mesh's axis order within a dimension.

``structured_seeds(shapes, updated, axes)``: the textbook configurations as
whole states, where the search starts from too: data parallel, FSDP, tensor
parallel and FSDP x tensor parallel over the mesh's axes (the last, minor axis
the tensor-parallel one, the others the data / FSDP axes); each also with its
activations constrained (``activation_seed``: the batch kept on its axes, as
MaxText's rules write it).

``activation_candidates(shape, axes)``: the constraints an activation may take
(``activations``), None (unconstrained) first.

``structure_groups(reader, values)``: arguments whose values are used the
same way (shape and type, and per use the op, the operand position, the
result types and how those results are used in turn) form one group and get
one choice: the weights of repeated layers are searched once.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator, Sequence

from jaxlib.mlir import ir
from jaxlib.mlir.dialects import stablehlo

from shardc.compiler.auto.activations import is_open_mark
from shardc.compiler.cost.flops import ELEMENTWISE, TRANSCENDENTAL
from shardc.compiler.cost_aware.regions import op_fingerprint
from shardc.compiler.propagation.values import ModuleValues
from shardc.compiler.sharding.axes import full_axis
from shardc.compiler.sharding.tensor import DimSharding, TensorSharding

# An assignment of mesh axes to dimensions: one tuple of axis names per dimension, or
# None for a dimension left open (an activation's: propagation may shard it).
Spec = tuple[tuple[str, ...] | None, ...]


def candidates(shape: Sequence[int], axes: Sequence[tuple[str, int]],
               windows: frozenset[int] = frozenset()) -> list[Spec]:
    """The specs ``shape`` may take on a mesh with these ``(name, size)`` axes (size > 1),
    none sharding a dimension of ``windows`` (``window_dims``)."""
    rank = len(shape)
    replicated: Spec = ((),) * rank
    found: list[Spec] = [replicated]
    names = [name for name, _ in axes]
    sizes = dict(axes)

    def fits(spec: Spec) -> bool:
        if any(spec[d] for d in windows):
            return False
        for dim, used in zip(shape, spec):
            total = 1
            for name in used:
                total *= sizes[name]
            if dim % total:
                return False
        return True

    def add(assigned: dict[int, tuple[str, ...]]) -> None:
        spec = tuple(assigned.get(d, ()) for d in range(rank))
        if spec not in found and fits(spec):
            found.append(spec)

    for name in names:
        for d in range(rank):
            add({d: (name,)})
    for a, b in itertools.permutations(names, 2):
        for d1, d2 in itertools.permutations(range(rank), 2):
            add({d1: (a,), d2: (b,)})
    for count in range(2, len(names) + 1):
        for group in itertools.combinations(names, count):
            for d in range(rank):
                add({d: group})
    return found


# A convolution's result as its dimension numbers lay it out: its spatial (window)
# dimensions and its feature dimension.
Image = tuple[frozenset[int], int]


def activation_candidates(shape: Sequence[int], axes: Sequence[tuple[str, int]],
                          image: Image | None = None) -> list[Spec | None]:
    """What an activation (``activations``: a dot's or convolution's result whose
    leading dimension is a batch) may be constrained to: None (no constraint, as
    written), then the batch over the data axes (every axis but the last, minor
    one) with the other dimensions open (MaxText's constraints, the rest left to
    the weights), or unsharded, or one of them over the model axis; the batch over
    every axis.

    A convolution's result (``image``: ``convolution_result``) is constrained
    closed, its spatial dimensions unsharded (``window_dims``: XLA's halos are
    not modelled), only its features over the model axis: left open, its
    features take the kernel's FSDP axes beside the batch, a state XLA
    partitions with far more operations than the cost model counts."""
    names = [name for name, _ in axes]
    rank = len(shape)
    sizes = dict(axes)
    found: list[Spec | None] = [None]
    if not names or rank < 1:
        return found
    model, data = names[-1], tuple(names[:-1])

    def add(spec: list) -> None:
        spec = tuple(spec)
        if spec not in found and all(
                used is None or shape[d] % math.prod(sizes[a] for a in used) == 0
                for d, used in enumerate(spec)):
            found.append(spec)

    if data:
        add([data] + [None] * (rank - 1))
        add([data] + [()] * (rank - 1))
        for d in range(1, rank):
            add([data] + [(model,) if e == d else () for e in range(1, rank)])
    add([tuple(names)] + [None] * (rank - 1))
    add([tuple(names)] + [()] * (rank - 1))
    if image is not None:
        windows, _ = image
        closed = [None] + [tuple(() if used is None else used for used in spec)
                           for spec in found[1:]]
        found = [spec for spec in dict.fromkeys(closed)
                 if spec is None or not any(spec[d] for d in windows)]
    return found


def activation_seed(shape: Sequence[int], axes: Sequence[tuple[str, int]], tensor: bool,
                    residual: bool, image: Image | None = None) -> Spec | None:
    """An activation's constraint in a textbook configuration with constrained
    activations: the batch over the axes the configuration gives it (the data
    axes beside tensor parallelism, else every axis); the rest unsharded where it
    is added to the residual stream (``is_residual``: MaxText's rules leave the
    embedding unsharded), else open (heads, hidden units: the weights' tensor
    parallelism reaches them); a convolution's result (``image``) closed, its
    features over the model axis beside tensor parallelism (MaxText's ``conv``
    activations); None where that does not divide the batch."""
    names = [name for name, _ in axes]
    batch = tuple(names[:-1]) if tensor else tuple(names)
    if not shape or not batch or shape[0] % math.prod(dict(axes)[a] for a in batch):
        return None
    if image is not None:
        _, feature = image
        model = names[-1]
        spec: list = [batch] + [()] * (len(shape) - 1)
        if tensor and shape[feature] % dict(axes)[model] == 0:
            spec[feature] = (model,)
        return tuple(spec)
    rest: tuple | None = () if residual else None
    return (batch,) + (rest,) * (len(shape) - 1)


def convolution_result(reader: ModuleValues, mark: int) -> Image | None:
    """The layout of the convolution whose result the mark ``mark`` constrains (its
    output spatial dimensions and feature dimension, from its dimension numbers),
    or None where a mark constrains anything else."""
    graph = reader.graph
    op = graph.value_def[graph.op_operands[graph.value_def[mark]][0]]
    if op < 0 or graph.op_name[op] != "stablehlo.convolution":
        return None
    dims = stablehlo.ConvDimensionNumbers(graph.ops[op].attributes["dimension_numbers"])
    return frozenset(dims.output_spatial_dimensions), dims.output_feature_dimension


def projects_weight(reader: ModuleValues, mark: int, weights: set[int]) -> bool:
    """Whether the activation ``mark`` (a mark's result) is a weight's forward dot or
    convolution: the first that reads one of ``weights`` (graph values of the weight
    arguments).
    A textbook configuration constrains those alone: the backward dots' partial
    sums are added before they are reduced."""
    graph = reader.graph
    dot = graph.value_def[graph.op_operands[graph.value_def[mark]][0]]
    for operand in graph.op_operands[dot] if dot >= 0 else ():
        if operand in weights:
            first = min((op for op, _ in _uses_through_marks(graph, operand)
                         if graph.op_name[op] in _CONTRACTIONS), default=None)
            if first == dot:
                return True
    return False


_CONTRACTIONS = frozenset({"stablehlo.dot_general", "stablehlo.convolution"})


def starts_stream(reader: ModuleValues, mark: int) -> bool:
    """Whether the activation ``mark`` (a mark's result) is a sum: the anchors that are
    no dot or convolution are the sums that start a residual stream
    (``activations.stream_starts``), which a textbook configuration constrains as
    it does a projection added to the stream."""
    graph = reader.graph
    op = graph.value_def[graph.op_operands[graph.value_def[mark]][0]]
    return op >= 0 and graph.op_name[op] == "stablehlo.add"


def is_residual(reader: ModuleValues, value: int) -> bool:
    """Whether an activation is added to the residual stream as it is (a mixture of
    experts' output, combined first, keeps its experts on the model axis)."""
    return _reaches_add(reader.graph, value, hops=1)


def model_width(shapes: Sequence[Sequence[int]], updated: Sequence[bool],
                windows: Sequence[Sequence[int]] | None = None) -> int | None:
    """The model's width: the commonest length among the weights' dimensions (the
    embedding, MaxText's ``embed``), not counting ``windows`` (per weight, the
    dimensions a convolution slides its window over: a 3x3 kernel's 3s are no
    width)."""
    lengths: dict[int, int] = {}
    windows = windows if windows is not None else [()] * len(shapes)
    for shape, weight, window in zip(shapes, updated, windows):
        if weight and len(shape) >= 2:
            for d, length in enumerate(shape):
                if d not in window:
                    lengths[length] = lengths.get(length, 0) + 1
    return max(lengths, key=lambda n: (lengths[n], n), default=None)


# The textbook configurations: (name, whether weights shard over the data axes (FSDP),
# whether they shard over the model axis (tensor parallel)).
CONFIGURATIONS = (("data parallel", False, False), ("FSDP", True, False),
                  ("tensor parallel", False, True), ("FSDP x tensor parallel", True, True))


def weight_roles(reader: ModuleValues, value: int, width: int | None,
                 weights: frozenset[int] = frozenset()) -> tuple[int | None, int | None]:
    """``(embedding dimension, tensor-parallel dimension)`` of a weight (graph value
    ``value``) as its first dot (the forward one) uses it, or None each where it
    does not say: Megatron's alternation, which the lengths alone cannot tell
    apart when a weight is square.

    A weight whose dot narrows what it reads (hidden units or heads to the width)
    or keeps its length, and whose result is added to the residual stream
    (directly, or after one more op: a mixture of experts' combine), projects back
    to it: its contracted dimension holds the heads or hidden units (tensor
    parallel) and its free one the embedding. Any other contracts the embedding,
    its free dimension tensor parallel: a dot that widens (an LSTM's gates, an
    MLP's first layer) reads the embedding whatever its result is added to (a bias,
    the recurrent term). A dimension the dot batches (the experts of a mixture of
    experts) is the tensor-parallel one (expert parallelism). A dot that contracts
    the embedding into few elements (``_narrow``: a router, a low-rank factor) has
    none worth splitting: ``UNSPLIT``.

    A dot whose other operand is an argument other than ``weights`` (graph values),
    reshaped or transposed at most, embeds the input (a ViT's patches, an audio
    model's features): its free dimension is the embedding, whatever its lengths
    (raw features may be fewer or more than the width); features computed first (a
    diffusion model's sinusoidal time embedding) feed an ordinary MLP. A table a gather reads at
    indices the arguments give (a token embedding; not a relative position bias
    read at constant indices) is tensor parallel over its indexed rows (MaxText's
    vocab on ``model``).
    """
    graph = reader.graph
    shape = graph.value_shape[value] or ()
    for op, position in sorted(_uses_through_marks(graph, value)):  # program order
        name = graph.op_name[op]
        if name == "stablehlo.convolution" and position == 1:
            # A kernel: its input features are contracted (the FSDP dimension, as a
            # dot's embedding), its output features are the tensor-parallel one.
            dims = stablehlo.ConvDimensionNumbers(graph.ops[op].attributes["dimension_numbers"])
            return dims.kernel_input_feature_dimension, dims.kernel_output_feature_dimension
        if name == "stablehlo.gather" and position == 0 and any(
                graph.value_def[v] < 0 and graph.op_name[graph.value_owner[v]] == "func.func"
                for v in _computed_from(graph, graph.op_operands[op][1])):
            indexed = list(stablehlo.GatherDimensionNumbers(
                graph.ops[op].attributes["dimension_numbers"]).start_index_map)
            rest = [d for d in range(len(shape)) if d not in indexed]
            return _embedding(shape, rest, width), (indexed[0] if indexed else None)
        if name != "stablehlo.dot_general" or position > 1:
            continue
        dims = stablehlo.DotDimensionNumbers(graph.ops[op].attributes["dot_dimension_numbers"])
        side = "lhs" if position == 0 else "rhs"
        contracted = list(getattr(dims, f"{side}_contracting_dimensions"))
        batched = list(getattr(dims, f"{side}_batching_dimensions"))
        free = [d for d in range(len(shape)) if d not in contracted and d not in batched]
        kept, read = math.prod(shape[d] for d in free), math.prod(shape[d] for d in contracted)
        # A dot onto the width from more (an MLP's second layer) projects back to the
        # residual stream however many ops (dropout, a gate) stand before the add; one
        # that reads the data alone (an input embedding) writes into it, as a
        # projection does.
        embeds_input = not batched and _raw_input(graph, graph.op_operands[op][1 - position],
                                                  weights)
        projects = embeds_input or kept <= read and (
            _reaches_add(graph, graph.op_results[op][0], hops=2)
            or kept < read and any(shape[d] == width for d in free))
        tensor_side = contracted if projects else free
        # A projection's free dimension of another length than the width may be no
        # embedding (a contrastive head's output): the lengths decide then; an input
        # embedding's is one.
        if embeds_input:
            embed = _embedding(shape, free, width)
        elif projects:
            embed = next((d for d in free if shape[d] == width), None)
        else:
            embed = _embedding(shape, contracted, width)
        tensor = batched[0] if batched else next(
            (d for d in tensor_side if d != embed), None)
        if not projects and tensor is not None and not batched and _narrow(
                graph, op, kept, width, weights):
            tensor = UNSPLIT
        return embed, tensor
    if _elementwise_only(graph, value):
        return _embedding(shape, range(len(shape)), width), UNSPLIT
    return None, None


def _elementwise_only(graph, value: int) -> bool:
    """Whether every use of ``value`` (through open marks, layout ops and broadcasts)
    is elementwise: a table added to the activations (a ViT's position embedding, a
    bias over two dimensions) lies along them, its dimensions the residual stream's
    (the sequence, the embedding), none of them heads or hidden units. Split over the
    model axis by its lengths alone, a position table had split the patches of every
    activation it is added to (a ViT on 4x2: MaxText's state priced 1.17x the
    expert's, who writes it ``(None, embed)``)."""
    uses = _uses_through_layout(graph, value)
    while any(graph.op_name[op] in _ALONG for op, _ in uses):
        uses = [use for op, position in uses for use in (
            _uses_through_layout(graph, graph.op_results[op][0])
            if graph.op_name[op] in _ALONG else [(op, position)])]
    return bool(uses) and all(graph.op_name[op] in _POINTWISE for op, _ in uses)


_POINTWISE = ELEMENTWISE | TRANSCENDENTAL
# Ops that lay a table along the activations (a broadcast over the batch, the rows of
# a sequence's length sliced off a longer table).
_ALONG = frozenset({"stablehlo.broadcast_in_dim", "stablehlo.slice"})


# ``weight_roles``' tensor-parallel dimension of a weight no dimension of which is worth
# splitting over the model axis (a low-rank factor, a router).
UNSPLIT = -1
# A dot's output this many times narrower than the width is small (a router's experts, a
# gate, one shared K/V head): its weight is read by every device whole (MaxText's
# ``(embed, None)``).
SMALL_OUTPUT = 8


def _narrow(graph, dot: int, length: int, width: int | None, weights: frozenset[int]) -> bool:
    """Whether a dot that contracts the embedding writes ``length`` elements per row (its
    weight's free dimensions together) not worth splitting over the model axis: far
    fewer than the width
    (``SMALL_OUTPUT``), or narrower at all and contracted again by another weight's dot
    (a low-rank factor: the rank is a bottleneck between two weights, whose split costs
    a reduction of the wide result for a few operations saved).

    Split, such a dimension shards the dot's result over the model axis: the
    second factor's dot then sums partial results over it, or the small result is
    gathered whole, each as many bytes as the wide activations, to save work on the
    narrow ones alone."""
    if width is None or length >= width:
        return False
    if length * SMALL_OUTPUT <= width:
        return True
    return any(graph.op_name[op] == "stablehlo.dot_general" and position < 2
               and _unlaid(graph, graph.op_operands[op][1 - position]) in weights
               for op, position in _uses_through_layout(graph, graph.op_results[dot][0]))


def _unlaid(graph, value: int) -> int:
    """``value`` before the reshapes, transposes, conversions and open marks it went
    through."""
    while graph.value_def[value] >= 0:
        op = graph.value_def[value]
        if graph.op_name[op] not in _LAYOUT_OPS and not (
                graph.op_name[op] == "sdy.sharding_constraint" and is_open_mark(graph.ops[op])):
            break
        value = graph.op_operands[op][0]
    return value


def _uses_through_layout(graph, value: int) -> list[tuple[int, int]]:
    """The uses of ``value``, those of an open mark or a layout op (``_LAYOUT_OPS``)
    replaced by its result's uses."""
    found = []
    for op, position in _uses_through_marks(graph, value):
        if graph.op_name[op] in _LAYOUT_OPS:
            found.extend(_uses_through_layout(graph, graph.op_results[op][0]))
        else:
            found.append((op, position))
    return found


def _embedding(shape: Sequence[int], side: Sequence[int], width: int | None) -> int | None:
    """The dimension among ``side`` that holds the embedding: the one of the model's
    width, else the side's only dimension (the op says which side it is where the
    width, the commonest length, is another: an LSTM's gates match its vocabulary)."""
    found = next((d for d in side if shape[d] == width), None)
    return side[0] if found is None and len(side) == 1 else found


def _raw_input(graph, value: int, weights: frozenset[int]) -> bool:
    """Whether ``value`` is a function argument not among ``weights``, reshaped,
    transposed or converted at most (the search's marks looked through)."""
    value = _unlaid(graph, value)
    if graph.value_def[value] >= 0:
        return False
    owner = graph.value_owner[value]
    return bool(weights) and value not in weights and owner >= 0 and (
        graph.op_name[owner] == "func.func")


_LAYOUT_OPS = frozenset({"stablehlo.reshape", "stablehlo.transpose", "stablehlo.convert"})


def _computed_from(graph, value: int) -> Iterator[int]:
    """``value`` and every value it is computed from, in its function or, through a
    region's arguments, the ops around it (a loop's carried values also from its
    body's last trip; a loop's or branch's results from its regions' returns)."""
    seen: set[int] = set()
    stack = [value]
    while stack:
        current = stack.pop()
        if current in seen:
            continue
        seen.add(current)
        yield current
        op, owner = graph.value_def[current], graph.value_owner[current]
        if op >= 0:
            stack.extend(graph.op_operands[op])
            for _, block in graph.op_blocks[op]:
                if block:
                    stack.extend(graph.op_operands[block[-1]])
        elif owner >= 0 and graph.op_name[owner] == "stablehlo.while":
            k = graph.value_arg_index[current]
            stack.append(graph.op_operands[owner][k])
            body = graph.op_blocks[owner][-1][1]
            if body:
                stack.append(graph.op_operands[body[-1]][k])
        elif owner >= 0 and graph.op_name[owner] != "func.func":
            stack.extend(graph.op_operands[owner])


def window_dims(reader: ModuleValues, value: int) -> frozenset[int]:
    """The dimensions of ``value`` an op that reads it slides a window over, from the
    op's own dimension numbers: a convolution's input or kernel spatial dimensions,
    a ``reduce_window``'s dimensions of window > 1 (pooling).

    AUTO shards none of them: XLA partitions such a dimension with halo exchanges
    and windows recomputed at the shard edges, operations and bytes the cost model
    does not count (it prices the convolution as if each shard's windows were its
    own), so a state that shards them looks cheaper than XLA makes it. The expert
    shards a convolution's batch and features, never its image."""
    graph = reader.graph
    found: set[int] = set()
    for op, position in _uses_through_marks(graph, value):
        name = graph.op_name[op]
        if name == "stablehlo.convolution" and position < 2:
            dims = stablehlo.ConvDimensionNumbers(graph.ops[op].attributes["dimension_numbers"])
            found.update(dims.input_spatial_dimensions if position == 0
                         else dims.kernel_spatial_dimensions)
        elif name == "stablehlo.reduce_window" and position == 0:
            window = ir.DenseI64ArrayAttr(graph.ops[op].attributes["window_dimensions"])
            found.update(d for d, size in enumerate(window) if size > 1)
    return frozenset(found)


def _reaches_add(graph, value: int, hops: int, origin: int | None = None) -> bool:
    """Whether ``value`` is an operand of an ``add`` within ``hops`` ops (the search's
    marks are not counted) whose other operand is not computed from it: an add of a
    value to a function of itself is elementwise arithmetic, not a residual stream
    (tanh-approximated GELU, ``jax.nn.gelu``'s default, adds ``0.044715 x**3`` to its
    ``x``, which had made every GELU MLP's hidden units a residual add)."""
    origin = value if origin is None else origin
    for op, position in _uses_through_marks(graph, value):
        if graph.op_name[op] == "stablehlo.add" and not any(
                _computed_within(graph, other, origin, ELEMENTWISE_HOPS)
                for p, other in enumerate(graph.op_operands[op]) if p != position):
            return True
        if hops > 1 and graph.op_results[op] and _reaches_add(
                graph, graph.op_results[op][0], hops - 1, origin):
            return True
    return False


# How many ops back an add's other operand is searched for the value it adds to:
# GELU's polynomial (``x * x * x`` times a constant) is three.
ELEMENTWISE_HOPS = 4


def _computed_within(graph, value: int, source: int, hops: int) -> bool:
    """Whether ``value`` is ``source`` or computed from it within ``hops`` ops."""
    if value == source:
        return True
    op = graph.value_def[value]
    return hops > 0 and op >= 0 and any(
        _computed_within(graph, operand, source, hops - 1) for operand in graph.op_operands[op])


def structured_seeds(shapes: Sequence[Sequence[int]], updated: Sequence[bool],
                     axes: Sequence[tuple[str, int]],
                     roles: Sequence[tuple[int | None, int | None]] | None = None,
                     windows: Sequence[Sequence[int]] | None = None
                     ) -> list[tuple[str, list[Spec | None]]]:
    """Per configuration of ``CONFIGURATIONS``, a spec per argument group (None: left
    open where the configuration's spec does not divide the shape).

    ``updated``: per group, whether it is state the step returns updated (a weight
    or an optimizer moment: an argument of the type of a result); the others are
    data, their leading dimension the batch. A weight's dimension whose length
    is the model's width (the commonest length among the weights' dimensions:
    the embedding, MaxText's ``embed``) takes the data axes under FSDP; its
    other dimension (heads, hidden units) the model axis under tensor
    parallelism. ``roles``: per group, ``weight_roles``' dimensions where the
    program's dots and convolutions say them (they decide first); ``windows``:
    per group, the dimensions windows slide over (``window_dims``), never the width.
    The batch spans the axes the weights leave free of tensor parallelism."""
    names = [name for name, _ in axes]
    if not names:
        return []
    sizes = dict(axes)
    model, data = names[-1], tuple(names[:-1])
    width = model_width(shapes, updated, windows)

    def divides(length: int, used: tuple[str, ...]) -> bool:
        return length % math.prod(sizes[a] for a in used) == 0

    seeds = []
    roles = roles if roles is not None else [(None, None)] * len(shapes)
    for name, fsdp, tensor in CONFIGURATIONS:
        specs: list[Spec | None] = []
        for shape, weight, (embed_role, tensor_role) in zip(shapes, updated, roles):
            spec = [()] * len(shape)
            if not weight:
                batch = data if tensor else tuple(names)
                if shape and batch and divides(shape[0], batch):
                    spec[0] = batch
            elif len(shape) >= 2:
                embed = embed_role if embed_role is not None else next(
                    (d for d, n in enumerate(shape) if n == width), None)
                if fsdp and data and embed is not None and divides(shape[embed], data):
                    spec[embed] = data
                other = tensor_role if tensor_role is not None and tensor_role != embed else next(
                    (d for d in range(len(shape) - 1, -1, -1) if d != embed), None)
                if tensor_role == UNSPLIT:
                    other = None
                if tensor and other is not None and divides(shape[other], (model,)):
                    spec[other] = (model,)
            specs.append(tuple(spec))
        seeds.append((name, specs))
    return seeds


def tensor_sharding(mesh: str, spec: Spec, sizes: dict[str, int]) -> TensorSharding:
    """``spec`` as a closed sharding on the mesh symbol ``mesh``."""
    return TensorSharding(mesh, tuple(
        DimSharding((), False) if used is None else
        DimSharding(tuple(full_axis(name, sizes[name]) for name in used), True)
        for used in spec))


def spec_of(sharding: TensorSharding | None, rank: int) -> Spec | None:
    """A propagated sharding as a ``Spec`` (replicated when None); None where it uses a
    sub-axis, which a ``PartitionSpec`` cannot name."""
    if sharding is None:
        return ((),) * rank
    spec = []
    for dim in sharding.dims:
        if any(a.size != a.total for a in dim.axes):
            return None
        spec.append(tuple(a.name for a in dim.axes))
    return tuple(spec)


def structure_groups(reader: ModuleValues, values: Sequence[int]) -> list[list[int]]:
    """Indices into ``values`` (function arguments of ``reader``'s module) grouped by how
    each is used, groups in order of first member."""
    groups: dict[tuple, list[int]] = {}
    for index, value in enumerate(values):
        groups.setdefault(_use_key(reader, value, depth=2), []).append(index)
    return list(groups.values())


def _use_key(reader: ModuleValues, value: int, depth: int) -> tuple:
    """The value's type, and per use: the op as the cost-aware search's structure keys
    see it (name, result types, attributes: a dot's dimension numbers tell a forward
    use from a backward one), the operand position, and the uses of its results.
    The search's activation marks are looked through (they stand for no op)."""
    graph = reader.graph
    uses = []
    for op, position in _uses_through_marks(graph, value):
        if graph.op_terminator[op]:  # returned: which result it is says nothing of its use
            position = -1
        name, _tag, *rest = op_fingerprint(reader, op)
        inner = ()
        if depth > 1:
            inner = tuple(_use_key(reader, result, depth - 1) for result in graph.op_results[op])
        uses.append((name, position, *rest, inner))
    return (graph.value_type_key[value], tuple(sorted(uses, key=repr)))


def _uses_through_marks(graph, value: int) -> list[tuple[int, int]]:
    """The uses of ``value``, those of an open mark replaced by the mark's own uses."""
    found = []
    for op, position in graph.uses[value]:
        if graph.op_name[op] == "sdy.sharding_constraint" and is_open_mark(graph.ops[op]):
            found.extend(_uses_through_marks(graph, graph.op_results[op][0]))
        else:
            found.append((op, position))
    return found
