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
the tensor-parallel one, the others the data / FSDP axes).

``structure_groups(reader, values)``: arguments whose values are used the
same way (shape and type, and per use the op, the operand position, the
result types and how those results are used in turn) form one group and get
one choice: the weights of repeated layers are searched once.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence

from shardc.compiler.cost_aware.regions import op_fingerprint
from shardc.compiler.propagation.values import ModuleValues
from shardc.compiler.sharding.axes import full_axis
from shardc.compiler.sharding.tensor import DimSharding, TensorSharding

# An assignment of mesh axes to dimensions: one tuple of axis names per dimension.
Spec = tuple[tuple[str, ...], ...]


def candidates(shape: Sequence[int], axes: Sequence[tuple[str, int]]) -> list[Spec]:
    """The specs ``shape`` may take on a mesh with these ``(name, size)`` axes (size > 1)."""
    rank = len(shape)
    replicated: Spec = ((),) * rank
    found: list[Spec] = [replicated]
    names = [name for name, _ in axes]
    sizes = dict(axes)

    def fits(spec: Spec) -> bool:
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


# The textbook configurations: (name, whether weights shard over the data axes (FSDP),
# whether they shard over the model axis (tensor parallel)).
CONFIGURATIONS = (("data parallel", False, False), ("FSDP", True, False),
                  ("tensor parallel", False, True), ("FSDP x tensor parallel", True, True))


def structured_seeds(shapes: Sequence[Sequence[int]], updated: Sequence[bool],
                     axes: Sequence[tuple[str, int]]) -> list[tuple[str, list[Spec | None]]]:
    """Per configuration of ``CONFIGURATIONS``, a spec per argument group (None: left
    open where the configuration's spec does not divide the shape).

    ``updated``: per group, whether it is state the step returns updated (a weight
    or an optimizer moment: an argument of the type of a result); the others are
    data, their leading dimension the batch. A weight's dimension whose length
    is the model's width (the commonest length among the weights' dimensions:
    the embedding, MaxText's ``embed``) takes the data axes under FSDP; its
    other dimension (heads, hidden units) the model axis under tensor
    parallelism. The batch spans the axes the weights leave free of tensor
    parallelism."""
    names = [name for name, _ in axes]
    if not names:
        return []
    sizes = dict(axes)
    model, data = names[-1], tuple(names[:-1])
    lengths: dict[int, int] = {}
    for shape, weight in zip(shapes, updated):
        if weight and len(shape) >= 2:
            for length in shape:
                lengths[length] = lengths.get(length, 0) + 1
    width = max(lengths, key=lambda n: (lengths[n], n), default=None)

    def divides(length: int, used: tuple[str, ...]) -> bool:
        return length % math.prod(sizes[a] for a in used) == 0

    seeds = []
    for name, fsdp, tensor in CONFIGURATIONS:
        specs: list[Spec | None] = []
        for shape, weight in zip(shapes, updated):
            spec = [()] * len(shape)
            if not weight:
                batch = data if tensor else tuple(names)
                if shape and batch and divides(shape[0], batch):
                    spec[0] = batch
            elif len(shape) >= 2:
                embed = next((d for d, n in enumerate(shape) if n == width), None)
                if fsdp and data and embed is not None and divides(shape[embed], data):
                    spec[embed] = data
                other = next((d for d in range(len(shape) - 1, -1, -1) if d != embed), None)
                if tensor and other is not None and divides(shape[other], (model,)):
                    spec[other] = (model,)
            specs.append(tuple(spec))
        seeds.append((name, specs))
    return seeds


def tensor_sharding(mesh: str, spec: Spec, sizes: dict[str, int]) -> TensorSharding:
    """``spec`` as a closed sharding on the mesh symbol ``mesh``."""
    return TensorSharding(mesh, tuple(
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
    use from a backward one), the operand position, and the uses of its results."""
    graph = reader.graph
    uses = []
    for op, position in graph.uses[value]:
        if graph.op_terminator[op]:  # returned: which result it is says nothing of its use
            position = -1
        name, _tag, *rest = op_fingerprint(reader, op)
        inner = ()
        if depth > 1:
            inner = tuple(_use_key(reader, result, depth - 1) for result in graph.op_results[op])
        uses.append((name, position, *rest, inner))
    return (graph.value_type_key[value], tuple(sorted(uses, key=repr)))
