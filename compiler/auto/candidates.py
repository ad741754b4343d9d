"""What an AUTO argument may be sharded as, and which arguments share one choice.

``candidates(shape, axes)``: every assignment of whole mesh axes to the
argument's dimensions that divides them, each axis used at most once and at
most two dimensions sharded: replicated; one axis on one dimension (data
parallel or FSDP on the data axis, tensor parallel on the model axis); two
axes on two dimensions (FSDP x tensor parallel); several axes on one
dimension (the batch over the whole mesh). Closed, so propagation cannot
move them, in the mesh's axis order within a dimension.

``structure_groups(reader, values)``: arguments whose values are used the
same way (shape and type, and per use the op, the operand position, the
result types and how those results are used in turn) form one group and get
one choice: the weights of repeated layers are searched once.
"""

from __future__ import annotations

import itertools
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
