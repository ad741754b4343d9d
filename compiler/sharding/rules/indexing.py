"""Rules for indexing ops: dynamic_slice, dynamic_update_slice, gather and scatter.

Gather and scatter share one walk over the slice (gather result / scatter
update) dims: offset dims pair with operand dims, batch dims with indices dims,
then the collapsed operand dims and the index-vector dim get their own factors.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from jaxlib.mlir import ir
from jaxlib.mlir.dialects import stablehlo

from shardc.compiler.sharding.builder import RuleBuilder, shape_of
from shardc.compiler.sharding.rule import FactorKind, OpShardingRule
from shardc.compiler.sharding.rules._attrs import defining_op_name
from shardc.compiler.sharding.rules.shape import pointwise_unless_resized


def dynamic_slice(op: ir.Operation, conservative: bool = False) -> OpShardingRule:
    """``([i, j], [], [])->([i, j])`` need_replication={j} blocked on sliced dims."""
    return pointwise_unless_resized(op, FactorKind.NEED_REPLICATION, blocked=True)


def dynamic_update_slice(op: ir.Operation, conservative: bool = False) -> OpShardingRule:
    """``([i, j], [i, k], [], [])->([i, j])``; update-only factor on updated dims.

    The update-only factor is need-replication unless every start index is a
    constant, which makes the update's position known statically.
    """
    operand_shape, update_shape = shape_of(op.operands[0]), shape_of(op.operands[1])
    constant_starts = all(
        defining_op_name(v) in ("stablehlo.constant", "sdy.constant") for v in op.operands[2:]
    )
    update_kind = FactorKind.PASS_THROUGH if constant_starts else FactorKind.NEED_REPLICATION
    builder = RuleBuilder.for_op(op)
    for dim, (op_size, update_size) in enumerate(zip(operand_shape, update_shape, strict=True)):
        if op_size == update_size:
            builder.add_factor_to_all(dim, op_size)
        else:
            builder.add_factor(dim, dim, op_size)
            builder.add_factor([None, dim], None, update_size, update_kind)
    return builder.build()


# (input dim, indices dim, slices dim, size, kind, blocked) -> adds one factor.
AddFactorFn = Callable[[int | None, int | None, int | None, int, FactorKind, bool], None]

_PT, _NR, _RED = FactorKind.PASS_THROUGH, FactorKind.NEED_REPLICATION, FactorKind.REDUCTION


def _add_offset_factors(
    add: AddFactorFn, input_dim: int, slices_dim: int, sizes: tuple[int, int], *, scatter: bool
) -> None:
    input_size, slice_size = sizes
    if input_size == slice_size:
        add(input_dim, None, slices_dim, input_size, _PT, False)
    elif scatter:
        add(input_dim, None, None, input_size, _NR, False)
        add(None, None, slices_dim, slice_size, _NR, False)
    elif slice_size == 1:
        # A size-1 window picks one element: sharding the operand there is a reduction.
        add(input_dim, None, None, input_size, _RED, False)
        add(None, None, slices_dim, 1, _NR, False)
    else:
        add(input_dim, None, slices_dim, input_size, _NR, True)


def _add_gather_scatter_factors(
    add: AddFactorFn,
    op: ir.Operation,
    dims: stablehlo.GatherDimensionNumbers | stablehlo.ScatterDimensionNumbers,
    *,
    scatter: bool,
    implicit_batch_kind: FactorKind = _PT,
) -> None:
    """Walk the slice dims of a gather (result) or scatter (updates) and add all factors."""
    num_inputs = len(op.results)
    input_shape = shape_of(op.operands[0])
    indices_shape = shape_of(op.operands[num_inputs if scatter else 1])
    slices_shape = shape_of(op.operands[num_inputs + 1] if scatter else op.results[0])
    if scatter:
        offset_dims, collapsed = dims.update_window_dims, dims.inserted_window_dims
        input_batching, indices_batching = (
            dims.input_batching_dims, dims.scatter_indices_batching_dims
        )
    else:
        offset_dims, collapsed = dims.offset_dims, dims.collapsed_slice_dims
        input_batching, indices_batching = (
            dims.operand_batching_dims, dims.start_indices_batching_dims
        )
    index_vector_dim = dims.index_vector_dim
    input_dim = batch_pos = 0
    for slices_dim, slice_size in enumerate(slices_shape):
        if slices_dim in offset_dims:
            while input_dim in collapsed or input_dim in input_batching:
                input_dim += 1
            sizes = (input_shape[input_dim], slice_size)
            _add_offset_factors(add, input_dim, slices_dim, sizes, scatter=scatter)
            input_dim += 1
            continue
        indices_dim = batch_pos if batch_pos < index_vector_dim else batch_pos + 1
        batch_pos += 1
        if indices_dim in indices_batching:
            input_batch_dim = input_batching[list(indices_batching).index(indices_dim)]
            add(input_batch_dim, indices_dim, slices_dim, slice_size, _PT, False)
        else:
            add(None, indices_dim, slices_dim, slice_size, implicit_batch_kind, False)
    for dim in collapsed:
        size = input_shape[dim]
        kind = _PT if scatter else (_NR if size == 1 else _RED)
        add(dim, None, None, size, kind, False)
    if index_vector_dim < len(indices_shape):
        add(None, index_vector_dim, None, indices_shape[index_vector_dim], _NR, False)


def gather(op: ir.Operation, conservative: bool = False) -> OpShardingRule:
    """``([i, j], [k, l])->([k, j])``-like: batch dims with indices, offset dims with operand."""
    builder = RuleBuilder.for_op(op)

    def add(input_dim, indices_dim, slices_dim, size, kind, blocked) -> None:
        builder.add_factor([input_dim, indices_dim], slices_dim, size, kind, blocked=blocked)

    dims = stablehlo.GatherDimensionNumbers(op.attributes["dimension_numbers"])
    _add_gather_scatter_factors(add, op, dims, scatter=False)
    return builder.build()


_PLAIN_REDUCERS = ("stablehlo.add", "stablehlo.multiply", "stablehlo.maximum", "stablehlo.minimum")
_BOOL_REDUCERS = ("stablehlo.and", "stablehlo.or")


def is_plain_reduction(body: ir.Block, num_inputs: int) -> bool:
    """The update computation is ``return op(cur_k, upd_k)...`` with one reducer for all k."""
    ops = list(body.operations)
    if len(ops) != num_inputs + 1 or len(list(body.arguments)) != 2 * num_inputs:
        return False
    *reducers, terminator = ops
    names = {r.name for r in reducers}
    if len(names) != 1:
        return False
    name = names.pop()
    if name in _BOOL_REDUCERS:
        element = ir.RankedTensorType(reducers[0].results[0].type).element_type
        if not (isinstance(element, ir.IntegerType) and element.width == 1):
            return False
    elif name not in _PLAIN_REDUCERS:
        return False
    for k, reducer in enumerate(reducers):
        # The reducers are commutative, so either argument order is a plain reduction.
        expected = {body.arguments[k], body.arguments[num_inputs + k]}
        if len(reducer.operands) != 2 or set(reducer.operands) != expected:
            return False
    return list(terminator.operands) == [r.results[0] for r in reducers]


def scatter(op: ir.Operation, conservative: bool = False) -> OpShardingRule:
    """``([i, j], [k, l], [k, j])->([i, j])``-like; indices batch dims reduce or replicate."""
    num_inputs = len(op.results)
    builder = RuleBuilder.for_op(op)

    def add(input_dim, indices_dim, slices_dim, size, kind, blocked) -> None:
        operand_dims: Sequence[int | None] = (
            [input_dim] * num_inputs + [indices_dim] + [slices_dim] * num_inputs
        )
        builder.add_factor(
            operand_dims, [input_dim] * num_inputs, size, kind, blocked=blocked
        )

    dims = stablehlo.ScatterDimensionNumbers(op.attributes["scatter_dimension_numbers"])
    plain = is_plain_reduction(op.regions[0].blocks[0], num_inputs)
    _add_gather_scatter_factors(
        add, op, dims, scatter=True, implicit_batch_kind=_RED if plain else _NR
    )
    return builder.build()


@dataclass(frozen=True)
class IndexedRoles:
    """Which operands of an indexed op (gather, scatter) play which part.

    ``data``: the tensors indexed into (gather operand, scatter inputs);
    ``indices``: the start indices; ``updates``: the scatter updates (empty
    for gather); ``scatter``: whether the result is the updated ``data``
    (scatter) rather than the slices (gather). The cost model reads its
    factor classes (pass-through, trivially sliced...) off the rule through
    these roles.
    """

    data: tuple[int, ...]
    indices: int
    updates: tuple[int, ...] = ()
    scatter: bool = False
    splat_data: bool = False  # every input a constant or a broadcast scalar
    # Data dims the indices select with slices of size 1 (collapsed, or windows of
    # size 1): XLA partitions a data tensor sharded there as "trivially sliced",
    # whether or not the dim is collapsed.
    unit_slice_dims: tuple[int, ...] = ()


def gather_roles(op: ir.Operation) -> IndexedRoles:
    """Operand 0 is indexed by operand 1; the result holds the slices."""
    dims = stablehlo.GatherDimensionNumbers(op.attributes["dimension_numbers"])
    slice_sizes = list(ir.DenseI64ArrayAttr(op.attributes["slice_sizes"]))
    unit = tuple(d for d in dims.start_index_map if slice_sizes[d] == 1)
    return IndexedRoles((0,), 1, unit_slice_dims=unit)


def scatter_roles(op: ir.Operation) -> IndexedRoles:
    """N inputs, then the indices, then N updates; results are the inputs updated."""
    n = len(op.results)
    splat = all(_is_splat(op.operands[k]) for k in range(n))
    dims = stablehlo.ScatterDimensionNumbers(op.attributes["scatter_dimension_numbers"])
    unit = tuple(d for d in dims.scattered_dims_to_operand_dims
                 if _scatter_window_size(dims, shape_of(op.operands[n + 1]), d) == 1)
    return IndexedRoles(tuple(range(n)), n, tuple(range(n + 1, 2 * n + 1)), True, splat,
                        unit)


def _scatter_window_size(dims: stablehlo.ScatterDimensionNumbers, update_shape: Sequence[int],
                         input_dim: int) -> int:
    """The size of the update window along ``input_dim`` (1 where the dim is inserted)."""
    if input_dim in dims.inserted_window_dims or input_dim in dims.input_batching_dims:
        return 1
    skipped = set(dims.inserted_window_dims) | set(dims.input_batching_dims)
    window_position = sum(1 for d in range(input_dim) if d not in skipped)
    return update_shape[dims.update_window_dims[window_position]]


def _is_splat(value: ir.Value) -> bool:
    """A constant, or a scalar broadcast: XLA rebuilds it in any sharding without moving data."""
    name = defining_op_name(value)
    if name in ("stablehlo.constant", "sdy.constant"):
        return True
    if name != "stablehlo.broadcast_in_dim":
        return False
    source = value.owner.operands[0]
    return ir.RankedTensorType(source.type).rank == 0
