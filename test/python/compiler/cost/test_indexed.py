"""The gather/scatter model's memo (``compiler/cost/indexed.py``): the memoised answer is
the computed one, for every sharding it is asked about."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P
from jaxlib.mlir import ir

from shardc.compiler import jit
from shardc.compiler.cost.indexed import (
    _indexed_communication,
    adjusted_indices_bytes,
    indexed_communication,
    indexed_computed,
)
from shardc.compiler.propagation.values import ModuleValues
from shardc.compiler.sharding.rules import indexed_roles_for
from shardc.compiler.sharding.tensor import DimSharding
from shardc.dialects import make_context


def _gather():
    """``(rule, roles, operands, results, mesh)`` of a row gather from a table sharded by row."""
    mesh = jax.make_mesh((8,), ("x",), axis_types=(AxisType.Auto,))
    table = jax.device_put(np.ones((64, 16), np.float32), NamedSharding(mesh, P("x")))
    indices = jax.device_put(np.arange(8, dtype=np.int32), NamedSharding(mesh, P()))
    text = jit(lambda t, i: jnp.take(t, i, axis=0)).lower(table, indices).as_text(
        propagated=True)
    module = ir.Module.parse(text, make_context())
    reader = ModuleValues(module.operation, missing_as_replicated=True)
    op = reader.graph.op_name.index("stablehlo.gather")
    rule, operands, results = reader.rule_tensors(op)
    mesh = reader.mesh_of(*(t.sharding for t in results + operands))
    _gather.keep_alive = module
    return rule, indexed_roles_for(reader.graph.ops[op]), operands, results, mesh


def test_memoised_answers_are_the_computed_ones():
    rule, roles, operands, results, mesh = _gather()
    first = indexed_communication(rule, roles, operands, results, mesh)
    needs, computed, adjusted = _indexed_communication(rule, roles, operands, results, mesh)
    assert first and first == list(needs)
    assert indexed_computed(rule, roles, operands, results, mesh) == computed
    assert adjusted_indices_bytes(rule, roles, operands, results, mesh) == adjusted == 0
    assert indexed_communication(rule, roles, operands, results, mesh) == first
    # Another sharding of the table is another question (the key holds the shardings).
    data = operands[0]
    dims = (DimSharding((), True),) * len(data.shape)
    replicated = dataclasses.replace(data, sharding=data.sharding._replace(dims=dims))
    moved = [replicated, *operands[1:]]
    again = indexed_communication(rule, roles, moved, results, mesh)
    assert again == list(_indexed_communication(rule, roles, moved, results, mesh)[0])
    assert again != first


def test_a_methods_groups_reshard_their_output_before_the_level_above():
    """Llama's embedding lookup on 16x16 (the table [vocab{model}, d{data}], the tokens
    [batch{data}]): XLA gathers the table inside the ``data`` groups of the operand
    pass-through (index pass-through inside them), gathers each group's rows back
    over ``model`` (the in-group output is replicated: ``data`` sits on another dim in
    the requested output) and only then moves ``data`` to the batch (an all-to-all).
    XLA:CPU's collectives at 256 devices (the same on XLA:TPU, at 2 bytes):"""
    xla = [("collective-permute", 8192), ("all-gather", 32768000),
           ("all-gather", 33554432), ("all-to-all", 33554432)]
    mesh = jax.sharding.AbstractMesh((16, 16), ("data", "model"),
                                     axis_types=(AxisType.Auto,) * 2)
    table = jax.ShapeDtypeStruct((32000, 4096), jnp.bfloat16,
                                 sharding=NamedSharding(mesh, P("model", "data")))
    tokens = jax.ShapeDtypeStruct((16, 2048), jnp.int32,
                                  sharding=NamedSharding(mesh, P("data", None)))
    lowered = jit(lambda t, i: jnp.take(t, i, axis=0),
                  out_shardings=NamedSharding(mesh, P("data", None, None))).lower(table, tokens)
    found = [(e.kind, e.bytes_per_device) for e in lowered.comm_report(platform="cpu").entries]
    assert sorted(found) == sorted(xla)


def test_the_dry_run_inside_groups_sizes_the_per_group_output():
    """The same lookup, small, at 1024 devices (64 x 16): inside the ``data`` groups of
    the operand pass-through XLA dry-runs trivially sliced (replicated tokens, a
    partial output all-reduced over ``model``) against index pass-through (the table
    gathered over ``model``, the output after it) on the per-group output, 1/64 of the
    whole, and takes index pass-through. XLA:CPU's collectives at 1024 devices:"""
    xla = [("all-gather", 256), ("all-gather", 8192), ("all-gather", 16384),
           ("all-to-all", 16384), ("collective-permute", 64)]
    mesh = jax.sharding.AbstractMesh((64, 16), ("data", "model"),
                                     axis_types=(AxisType.Auto,) * 2)
    table = jax.ShapeDtypeStruct((512, 256), jnp.float32,
                                 sharding=NamedSharding(mesh, P("model", "data")))
    tokens = jax.ShapeDtypeStruct((64, 16), jnp.int32,
                                  sharding=NamedSharding(mesh, P("data", None)))
    lowered = jit(lambda t, i: t[i],
                  out_shardings=NamedSharding(mesh, P("data", None, None))).lower(table, tokens)
    found = [(e.kind, e.bytes_per_device) for e in lowered.comm_report(platform="cpu").entries]
    assert sorted(found) == sorted(xla)


def test_the_dry_run_counts_a_collective_over_part_of_an_axis_by_its_devices():
    """bench.plan_speed's lookup at 64 devices (4 x 16): the tokens need the vocab's
    ``"model":(1)4``. XLA's dry run costs gathering the tokens over those 4 devices
    (then the output all-reduced over ``model``) against gathering the output, by the
    devices in each group, and gathers the tokens; a collective over part of an axis
    counts its own devices, not the whole axis's. XLA:CPU's collectives at 64 devices:"""
    xla = [("collective-permute", 128), ("all-gather", 512), ("all-reduce", 8192),
           ("all-to-all", 8192)]
    mesh = jax.sharding.AbstractMesh((4, 16), ("data", "model"),
                                     axis_types=(AxisType.Auto,) * 2)
    table = jax.ShapeDtypeStruct((256, 64), jnp.float32,
                                 sharding=NamedSharding(mesh, P("model", "data")))
    tokens = jax.ShapeDtypeStruct((8, 16), jnp.int32, sharding=NamedSharding(mesh, P("data")))
    lowered = jit(lambda t, i: t[i], out_shardings=NamedSharding(mesh, P("data"))).lower(
        table, tokens)
    found = {}
    for e in lowered.comm_report(platform="cpu").entries:
        found[e.kind] = found.get(e.kind, 0) + e.bytes_per_device
    assert sorted(found.items()) == sorted(xla)


@pytest.mark.parametrize("count", [1, 2])
def test_a_result_computed_replicated_is_returned_without_gathering_it_again(count):
    """XLA's scatter handler computes a scatter of sharded updates into a replicated
    history (L-BFGS's memory of parameter differences) replicated, the updates
    gathered, and slices it to its sharding; its reshard cache keeps the replicated
    value for the slice, so returning it replicated in a tuple gathers nothing more.
    A single result (the root itself) is gathered again."""
    mesh = jax.make_mesh((4, 2), ("data", "model"), axis_types=(AxisType.Auto,) * 2)
    replicated, sharded = NamedSharding(mesh, P()), NamedSharding(mesh, P("data", "model"))
    args = (jax.device_put(np.zeros((4, 16, 32), np.float32), replicated),
            jax.device_put(np.ones((16, 32), np.float32), sharded), np.int32(1))

    def write(history, update, row):
        return tuple(history.at[row].set(update * (k + 2)) for k in range(count))

    shardings = dict(in_shardings=(replicated, sharded, replicated),
                     out_shardings=(replicated,) * count)
    lowered = jit(write, **shardings).lower(*args)
    predicted = {k: t.bytes_per_device for k, t in lowered.comm_report().totals().items()
                 if t.count}
    compiled = lowered.compile()
    assert predicted == {k: c.bytes_per_device
                         for k, c in compiled.collectives().items() if c.count}
    for ours, theirs in zip(compiled(*args), jax.jit(write, **shardings)(*args)):
        np.testing.assert_array_equal(ours, theirs)
        assert ours.sharding.is_equivalent_to(theirs.sharding, ours.ndim)


def test_a_summed_scatter_keeps_the_in_group_tiles_of_its_operand():
    """Expert-choice MoE's combine, ``zeros.at[g, index].add(out)``, every tensor's
    rows on ``data`` x ``expert``. Index pass-through would scatter into an identity
    replicated across the ``data`` x ``expert`` groups but keeping the tiles the
    in-group ``model`` axis can hold (``GroupShardingOnReplicatedDim``): [G / model],
    all-reduced, 32 KiB, not the whole [G] (64 KiB, which made it the cheapest method).
    Priced so, trivially sliced wins, as XLA chooses: the operand stays, indices and
    updates move onto ``model`` (collective-permutes, all-gathers), the partial sums
    are all-reduced over ``model``: 16 KiB. (At pod scale, the MoE step's 16 x 16 x 4
    mesh, XLA takes index pass-through: [G / model] summed over ``data`` x ``expert``.)"""
    mesh = jax.make_mesh((2, 2, 2), ("data", "expert", "model"),
                         axis_types=(AxisType.Auto,) * 3)
    rows = NamedSharding(mesh, P(("data", "expert")))
    groups, seq, experts, capacity, d = 8, 64, 4, 16, 32

    def combine(x, index, out):
        g = jnp.arange(groups)[:, None, None]
        return jnp.zeros_like(x).at[g, index].add(out)

    rand = np.random.default_rng(0)
    args = (jax.device_put(np.zeros((groups, seq, d), np.float32), rows),
            jax.device_put(rand.integers(0, seq, (groups, experts, capacity), np.int32), rows),
            jax.device_put(np.ones((groups, experts, capacity, d), np.float32), rows))
    lowered = jit(combine, out_shardings=rows).lower(*args)
    predicted = {k: t.bytes_per_device for k, t in lowered.comm_report().totals().items()}
    compiled = {k: c.bytes_per_device for k, c in lowered.compile().collectives().items()}
    assert predicted == compiled
    assert compiled["all-reduce"] == groups // 4 * seq * d * 4


def test_a_summed_scatter_replicates_its_operand_over_part_of_an_axis():
    """An embedding gradient on a data=2 x model=4 mesh, the table's rows on ``model``
    and its columns on ``data``, the ids' batch on ``data``. Past the columns'
    operand pass-through, the ids hold ``"model":(1)2`` and index pass-through
    replicates the table across those two groups: of its rows' whole ``model`` only
    the minor ``"model":(2)2`` stays (``GroupShardingOnReplicatedDim``). The partial
    sums are all-reduced as [16, 8] (not [8, 8]), then sliced to the rows' whole
    ``model`` in the other device order: a collective-permute of [8, 8]."""
    mesh = jax.make_mesh((2, 4), ("data", "model"), axis_types=(AxisType.Auto,) * 2)
    table = NamedSharding(mesh, P("model", "data"))
    rand = np.random.default_rng(0)
    args = (jax.device_put(rand.standard_normal((32, 16)).astype(np.float32), table),
            jax.device_put(rand.integers(0, 32, (8, 16), np.int32),
                           NamedSharding(mesh, P("data"))))
    grad = jax.grad(lambda t, i: jnp.sum(jnp.take(t, i, axis=0) ** 2))

    lowered = jit(grad, out_shardings=table).lower(*args)
    report = lowered.comm_report()
    predicted = {k: t.bytes_per_device for k, t in report.totals().items() if t.count}
    compiled = lowered.compile()
    assert predicted == {k: c.bytes_per_device
                         for k, c in compiled.collectives().items() if c.count}
    scatter = [(e.kind, e.bytes_per_device) for e in report.entries
               if e.op == "stablehlo.scatter"]
    assert scatter == [("all-reduce", 16 * 8 * 4), ("collective-permute", 8 * 8 * 4)]
    ours, theirs = compiled(*args), jax.jit(grad, out_shardings=table)(*args)
    np.testing.assert_allclose(ours, theirs, rtol=1e-6, atol=1e-6)
    assert ours.sharding.is_equivalent_to(theirs.sharding, ours.ndim)


@pytest.mark.parametrize("table, ids", [
    (P(("x", "y"), "z"), P("x")),
    (P(("x", "y"), "z"), P(("x", "y"))),
    (P(("x", "z"), "y"), P("z")),
])
def test_a_trivially_sliced_gather_moves_its_mask_to_the_output(table, ids):
    """An embedding lookup from a table sharded on rows over two axes of a 2x2x2 mesh
    (and on columns over the third) with sharded ids: XLA masks the ids out of each
    device's rows where the ids are before the groups gather them, then reshards that
    mask (predicates, one byte each) to the ids' part of the output: an all-gather of
    its own beside the ids'."""
    mesh = jax.make_mesh((2, 2, 2), ("x", "y", "z"), axis_types=(AxisType.Auto,) * 3)
    rand = np.random.default_rng(0)
    args = (jax.device_put(rand.standard_normal((1024, 64)).astype(np.float32),
                           NamedSharding(mesh, table)),
            jax.device_put(rand.integers(0, 1024, (8, 32), np.int32), NamedSharding(mesh, ids)))

    def lookup(t, i):
        return t[i]

    lowered = jit(lookup).lower(*args)
    report = lowered.comm_report()
    predicted = {k: t.bytes_per_device for k, t in report.totals().items() if t.count}
    compiled = lowered.compile()
    assert predicted == {k: c.bytes_per_device
                         for k, c in compiled.collectives().items() if c.count}
    assert any("mask" in e.reason and e.kind == "all-gather" for e in report.entries)
    ours, theirs = compiled(*args), jax.jit(lookup)(*args)
    np.testing.assert_array_equal(ours, theirs)
    assert ours.sharding.is_equivalent_to(theirs.sharding, ours.ndim)


@pytest.mark.parametrize("ids, all_reduces", [
    (P("x", "y"), 2),          # ids sharded on two dimensions: an all-reduce each
    (P(("x", "y")), 1),        # on one dimension over both axes: one
])
def test_index_passthrough_sums_each_sharded_index_dimension_on_its_own(ids, all_reduces):
    """An embedding gradient's scatter-add with ids sharded on batch and sequence: XLA
    scatters into a table replicated across the groups and all-reduces the partial sums
    along each sharded index dimension on its own, minor-most first, every time the
    whole table (``AllReduceAlongShardingDims``)."""
    mesh = jax.make_mesh((2, 2, 2), ("x", "y", "z"), axis_types=(AxisType.Auto,) * 3)
    rand = np.random.default_rng(0)
    args = (jax.device_put(rand.standard_normal((8, 32, 64)).astype(np.float32),
                           NamedSharding(mesh, ids)),
            jax.device_put(rand.integers(0, 1024, (8, 32), np.int32), NamedSharding(mesh, ids)))

    def scatter(u, i):
        return jnp.zeros((1024, 64), jnp.float32).at[i].add(u)

    lowered = jit(scatter, out_shardings=NamedSharding(mesh, P())).lower(*args)
    predicted = {k: (t.bytes_per_device, t.count)
                 for k, t in lowered.comm_report().totals().items() if t.count}
    compiled = lowered.compile()
    assert predicted == {k: (c.bytes_per_device, c.count)
                         for k, c in compiled.collectives().items() if c.count}
    assert predicted["all-reduce"] == (all_reduces * 1024 * 64 * 4, all_reduces)
    np.testing.assert_allclose(compiled(*args), jax.jit(scatter)(*args), rtol=1e-6, atol=1e-5)


def _table_and_ids(mesh, table, ids, ids_shape=(8, 16)):
    """A [512, 64] f32 table and int32 ids into its rows, placed with the specs given."""
    rand = np.random.default_rng(0)
    return (jax.device_put(rand.standard_normal((512, 64)).astype(np.float32),
                           NamedSharding(mesh, table)),
            jax.device_put(rand.integers(0, 512, ids_shape, np.int32),
                           NamedSharding(mesh, ids)))


def _embedding_gradient(t, i):
    return jax.grad(lambda t: jnp.sum(jnp.take(t, i, axis=0) ** 2))(t)


def test_indices_keep_their_tiles_on_part_of_a_larger_in_group_axis():
    """An embedding gradient on a 2x4 mesh, the table ``[{"model"}, {"data"}]`` and the
    ids ``[{"data"}]``: operand pass-through groups on ``data`` (2 groups) and the ids,
    replicated across the groups, keep their 2 tiles on the major half of ``model``
    (``GroupShardingOnReplicatedDim`` splits the 4 in-group devices: a
    collective-permute), where the scatter then passes them through and sums the table
    over that half (an all-reduce of the in-group table)."""
    mesh = jax.make_mesh((2, 4), ("data", "model"), axis_types=(AxisType.Auto,) * 2)
    args = _table_and_ids(mesh, P("model", "data"), P("data"), ids_shape=(2, 64))

    def grad(t, i):
        return jax.grad(lambda t: jnp.sum(t[i] ** 2))(t)

    lowered = jit(grad).lower(*args)
    predicted = {k: t.bytes_per_device for k, t in lowered.comm_report().totals().items()
                 if t.count}
    compiled = lowered.compile()
    assert predicted == {k: c.bytes_per_device
                         for k, c in compiled.collectives().items() if c.count}
    assert predicted["collective-permute"] == 64 * 4
    np.testing.assert_allclose(compiled(*args), jax.jit(grad)(*args), rtol=1e-6)


def _replicated_indices_case(shape):
    """A 2-D mesh, updates / table sharded on it, indices sharded on "x" then
    constrained replicated right before the op (as the cost-aware search leaves them)."""
    mesh = jax.make_mesh(shape, ("x", "y"), axis_types=(AxisType.Auto,) * 2)
    rand = np.random.default_rng(0)
    ids = jax.device_put(rand.integers(0, 512, (8, 16), np.int32), NamedSharding(mesh, P("x")))
    replicated = NamedSharding(mesh, P())
    return mesh, rand, ids, lambda i: jax.lax.with_sharding_constraint(i[..., None], replicated)


def _predicted_is_compiled(fun, args, **shardings):
    lowered = jit(fun, **shardings).lower(*args)
    predicted = {k: t.bytes_per_device for k, t in lowered.comm_report().totals().items()
                 if t.count}
    compiled = lowered.compile()
    assert predicted == {k: c.bytes_per_device
                         for k, c in compiled.collectives().items() if c.count}
    ours, theirs = compiled(*args), jax.jit(fun, **shardings)(*args)
    np.testing.assert_allclose(ours, theirs, rtol=1e-6, atol=1e-5)
    assert ours.sharding.is_equivalent_to(theirs.sharding, ours.ndim)
    return predicted


@pytest.mark.parametrize("shape", [(2, 4), (4, 2)])
def test_replicated_indices_of_a_scatter_take_the_updates_batch_axes(shape):
    """A codebook gradient: updates ``[{"x"}, {}, {"y"}]`` scattered at replicated
    indices into zeros ``[{}, {"y"}]``. XLA's index pass-through first merges the
    updates' batch axes into the indices (a slice), so it applies: each ``x`` group
    scatters its own updates into the table and all-reduces it over ``x``, instead of
    gathering the updates."""
    mesh, rand, ids, replicated = _replicated_indices_case(shape)
    updates = jax.device_put(rand.standard_normal((8, 16, 32)).astype(np.float32),
                             NamedSharding(mesh, P("x", None, "y")))
    numbers = jax.lax.ScatterDimensionNumbers(
        update_window_dims=(2,), inserted_window_dims=(0,), scatter_dims_to_operand_dims=(0,))

    def scatter(u, i):
        return jax.lax.scatter_add(jnp.zeros((512, 32), jnp.float32), replicated(i), u, numbers)

    predicted = _predicted_is_compiled(scatter, (updates, ids),
                                       out_shardings=NamedSharding(mesh, P(None, "y")))
    assert predicted["all-reduce"] == 512 * 32 // mesh.shape["y"] * 4


def test_replicated_indices_of_a_trivially_sliced_gather_take_the_output_batch_axes():
    """A lookup in a codebook ``[{"x"}, {"y"}]`` at replicated indices, the output asked
    ``[{"x"}, {}, {"y"}]`` on a 4x2 mesh: the indices, left replicated inside the ``x``
    groups, take the output's batch axes (kept on ``y`` in the groups): sliced, masked,
    and gathered back over ``y`` with their mask."""
    mesh, rand, ids, replicated = _replicated_indices_case((4, 2))
    table = jax.device_put(rand.standard_normal((512, 32)).astype(np.float32),
                           NamedSharding(mesh, P("x", "y")))
    numbers = jax.lax.GatherDimensionNumbers(offset_dims=(2,), collapsed_slice_dims=(0,),
                                             start_index_map=(0,))

    def lookup(t, i):
        return jax.lax.gather(t, replicated(i), numbers, (1, 32))

    predicted = _predicted_is_compiled(lookup, (table, ids),
                                       out_shardings=NamedSharding(mesh, P("x", None, "y")))
    # the sliced indices (int32) and their mask (bool), each gathered over "y"
    assert predicted["all-gather"] - 512 == 8 * 16 * 4 + 8 * 16


@pytest.mark.parametrize("shape", [(2, 4), (4, 2)])
def test_a_trivially_sliced_gather_output_borrows_replication_from_its_batch_dims(shape):
    """True-class weights of a sampled softmax: a table of rows on ``y``, labels on
    ``x``, the output asked ``[{"x"}, {"y"}]``, replicated nowhere. Grouping it on the
    ``y`` groups, XLA borrows the replication from the batch dim first, then from the
    columns, and lays the tiles left on the in-group devices: the columns on ``x``. The
    labels pass through on ``x`` and the result is moved onto the columns (an
    all-to-all), the mask gathered whole, the partial sums all-reduced over ``y``, then
    permuted to the requested tiles."""
    mesh = jax.make_mesh(shape, ("x", "y"), axis_types=(AxisType.Auto,) * 2)
    rand = np.random.default_rng(0)
    table = jax.device_put(rand.standard_normal((1024, 32)).astype(np.float32),
                           NamedSharding(mesh, P("y")))
    labels = jax.device_put(rand.integers(0, 1024, (16,), np.int32), NamedSharding(mesh, P("x")))
    predicted = _predicted_is_compiled(lambda t, i: t[i], (table, labels),
                                       out_shardings=NamedSharding(mesh, P("x", "y")))
    assert predicted["all-to-all"] == 16 // mesh.shape["x"] * 32 * 4  # the labels' rows


@pytest.mark.parametrize("table", [P(None, "y"), P("x", "y")])
@pytest.mark.parametrize("program", ["lookup", "gradient"])
def test_indices_lend_their_tiles_to_the_groups_pass_through_dims_first(table, program):
    """An embedding lookup (and its gradient) from a table with columns on ``y`` of a
    2x4 mesh, ids ``[{"x"}, {"y"}]``: operand pass-through groups on ``y`` (4 groups)
    and the ids, replicated nowhere, lend the 4 tiles the groups need from their
    pass-through dims in order (``GatherIndexDimsByPriority``): both of dim 0's, 2 of
    dim 1's. The 2 tiles left go to dim 1, laid on the in-group ``x``: an all-to-all
    from ``[{"x"}, {"y"}]``, then a permute into the in-group order."""
    mesh = jax.make_mesh((2, 4), ("x", "y"), axis_types=(AxisType.Auto,) * 2)
    funs = {"lookup": lambda t, i: jnp.take(t, i, axis=0), "gradient": _embedding_gradient}
    predicted = _predicted_is_compiled(funs[program], _table_and_ids(mesh, table, P("x", "y")))
    assert predicted["collective-permute"] == 8 * 16 // 8 * 4  # the ids' in-group tile


def test_indices_on_both_halves_of_an_axis_are_summed_once_per_half():
    """The gradient of that lookup on a 4x2 mesh: the ids keep 2 tiles on each dim,
    laid on the two halves of the in-group ``x`` (4). The index pass-through inside
    the ``y`` groups sums the table once per sharded index dim, over one half of ``x``
    each, and nothing is left for a level below (two all-reduces, not three)."""
    mesh = jax.make_mesh((4, 2), ("x", "y"), axis_types=(AxisType.Auto,) * 2)
    predicted = _predicted_is_compiled(_embedding_gradient,
                                       _table_and_ids(mesh, P(None, "y"), P("x", "y")))
    assert predicted["all-reduce"] == 2 * 512 * 64 // 2 * 4


def test_an_axis_of_size_one_groups_nothing():
    """An embedding gradient on an 8x1 mesh, the table's rows on the size-1 ``y``: XLA's
    tile assignment has no dim for ``y``, so no method groups on it and the
    scatter's partial sums need no all-reduce over it."""
    mesh = jax.make_mesh((8, 1), ("x", "y"), axis_types=(AxisType.Auto,) * 2)
    predicted = _predicted_is_compiled(_embedding_gradient,
                                       _table_and_ids(mesh, P("y", "x"), P("x")))
    assert "all-reduce" not in predicted
