"""Rules of XLA's SPMD partitioner the communication report follows, each held to
what XLA compiles: ``Lowered.comm_report()``'s bytes per device per collective kind
equal ``Compiled.collectives()``'s on 8 CPU devices."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from comm_comparison import mesh, predicted_and_compiled
from jax.sharding import PartitionSpec as P


def ones(*shape, dtype=np.float32):
    return np.ones(shape, dtype)


@pytest.mark.parametrize("x_shape, w_shape, x_spec, w_spec, out, kind", [
    # x's contraction sharded, w and the result replicated in each data group: x has
    # fewer elements there than the result, so XLA all-gathers x.
    ((4, 8, 64), (128, 64), P("data", None, "model"), P(), None, "all-gather"),
    ((4, 8, 64), (128, 64), P("data", None, "model"), P(), P("data"), "all-gather"),
    # the tied embedding's logits: the same choice
    ((4, 8, 64), (512, 64), P("data", None, "model"), P(), None, "all-gather"),
    # more elements in x than in the result: partial sums and an all-reduce
    ((4, 8, 256), (32, 256), P("data", None, "model"), P(), None, "all-reduce"),
    # grouped on w's rows: x (not divided by the groups) outweighs the group's result
    ((4, 8, 64), (128, 64), P(None, None, "model"), P("data", None), None, "all-reduce"),
])
def test_dot_sharded_on_one_side_of_the_contraction(x_shape, w_shape, x_spec, w_spec, out,
                                                    kind):
    """``PartitionBaseCase``: with the result and the other operand replicated in a
    device group, XLA keeps an operand's sharded contraction (partial sums, then an
    all-reduce) only when that operand has more elements in the group than the
    result; otherwise it all-gathers the operand."""
    predicted, compiled = predicted_and_compiled(
        lambda x, w: jnp.einsum("bsd,vd->bsv", x, w), (ones(*x_shape), ones(*w_shape)),
        (x_spec, w_spec), out)
    assert predicted == compiled
    assert set(compiled) == {kind}


def test_operand_sharded_on_the_group_axes_is_replicated_before_grouping():
    """A CG step's matrix-vector product, ``a [{data}, {model}] @ p [{data}]``: XLA groups
    on ``a``'s rows (``data``); ``p``, sharded on the group axes alone, is grouped on
    that dimension (``FindMatchingPartitionedDimsForGrouping``) and all-gathered over
    ``data`` (not moved to ``model`` by a permute), then ``a``'s columns keep the
    contraction: partial sums all-reduced over ``model``."""
    predicted, compiled = predicted_and_compiled(
        lambda a, p: a @ p, (ones(8, 8), ones(8)), (P("data", "model"), P("data")),
        P("data"))
    assert predicted == compiled == {"all-gather": 32, "all-reduce": 8}


def test_operand_sharded_on_the_group_axes_is_gathered_inside_the_groups_after():
    """``x [{data}] @ w [{data}, {model}]^T`` into ``[{data}, {}, {model}]``: grouped on
    ``w``'s rows (``model``), ``x`` and ``w`` sharded on ``data`` alone; ``w`` is
    grouped on its ``data`` dimension and all-gathered there, the result moved by
    an all-to-all."""
    predicted, compiled = predicted_and_compiled(
        lambda x, w: jnp.einsum("bsd,vd->bsv", x, w), (ones(4, 8, 64), ones(128, 64)),
        (P("data"), P("data", "model")), P("data", None, "model"))
    assert predicted == compiled == {"all-gather": 16384, "all-to-all": 16384}



@pytest.mark.parametrize("fun, out", [
    (lambda x, dy: dy.T @ x, P("fsdp")),
    (lambda x, dy: x.T @ dy, P(None, "fsdp")),
])
def test_inside_the_groups_the_operand_with_fewer_bytes_there_is_resharded(fun, out):
    """A dense kernel's gradient, ``x [{data, fsdp}]`` against ``dy [{data}, {fsdp}]``
    into ``[.., {fsdp}]``: XLA groups on ``dy``'s features (as the result), moves ``x``
    to ``model`` (where every group holds all of it), then lines up the contraction by
    permuting ``dy``, which holds fewer bytes in a group than ``x`` (though more
    globally), not by moving ``x`` again."""
    predicted, compiled = predicted_and_compiled(
        fun, (ones(16, 24), ones(16, 32)), (P(("data", "fsdp")), P("data", "fsdp")), out,
        grid=mesh((2, 2, 2), ("data", "fsdp", "model")))
    assert predicted == compiled == {"all-gather": 768, "all-reduce": 1536,
                                     "collective-permute": 896}


def test_branch_on_a_constant_index_is_folded_away():
    """An error check on values known when tracing (equinox's ``error_if`` of
    diffrax's ``t1 < t0``): a ``case`` whose index folds to a constant. XLA keeps
    only the taken branch, so the host callback's result of the other branch is
    never broadcast (no all-reduce)."""

    def checked(x):
        t0, t1 = jnp.float32(0.0), jnp.float32(10.0)
        direction = jnp.where(t0 < t1, 1.0, -1.0)
        bad = (t1 * direction) < (t0 * direction)

        def fail(x):
            return jax.pure_callback(lambda v: np.asarray(v), jax.ShapeDtypeStruct(
                x.shape, x.dtype), x)

        return jax.lax.cond(bad, fail, lambda x: x * 2.0, x)

    predicted, compiled = predicted_and_compiled(checked, (ones(8, 4),), (P("data"),), P())
    assert predicted == compiled


def test_branch_on_an_index_read_from_a_folded_branch_is_folded_away():
    """Two error checks in a row on values known when tracing, the second reading the
    first's result (diffrax checks its ``SaveAt(ts=...)`` is increasing, then inside
    ``[t0, t1]``): the second ``case``'s index reads the first's result through
    Shardy's data-flow edge; XLA folds both, so neither host callback's result is
    broadcast."""

    def fail(ts):  # equinox's error branch: the host raises, its result a placeholder
        return jax.pure_callback(lambda _: np.zeros(ts.shape, ts.dtype),
                                 jax.ShapeDtypeStruct(ts.shape, ts.dtype), 0)

    def checked(x):
        ts = jnp.asarray(np.linspace(0.0, 1.0, 5, dtype=np.float32))
        ts = jax.lax.cond(jnp.any(ts[1:] < ts[:-1]), fail, lambda t: t, ts)
        ts = jax.lax.cond(jnp.any((ts < 0.0) | (ts > 1.0)), fail, lambda t: t, ts)
        return x * ts[None, :]

    predicted, compiled = predicted_and_compiled(checked, (ones(8, 5),), (P("data"),),
                                                 P("data"))
    assert predicted == compiled == {}


def test_switch_on_a_constant_index_is_folded_away():
    """``lax.switch`` clamps its index into range (``stablehlo.clamp``): on a constant
    index the clamp folds too, and only the taken branch is kept, the host callback
    of the other never broadcast."""

    def fail(x):
        return jax.pure_callback(lambda v: np.asarray(v), jax.ShapeDtypeStruct(
            x.shape, x.dtype), x)

    def switched(x):
        return jax.lax.switch(1, [fail, lambda x: x * 2.0], x)

    predicted, compiled = predicted_and_compiled(switched, (ones(8, 4),), (P("data"),), P())
    assert predicted == compiled


@pytest.mark.parametrize("guard", [
    lambda t: jnp.logical_and(t > 0.0, False),
    lambda t: jnp.logical_not(jnp.logical_or(t > 0.0, True)),
    lambda t: jnp.where(False, t > 0.0, False),
    lambda t: jnp.where(jnp.logical_and(t > 1.0, False), t > 0.0,
                        jnp.logical_and(t > 2.0, False)),
])
def test_branch_on_a_flag_one_operand_decides_is_folded_away(guard):
    """A ``cond`` guarded by a flag that reads an argument but is decided by a constant
    (jaxopt's line searches: a ``done`` flag and-ed with a constant ``False``, a
    ``where`` on a constant): XLA's algebraic simplifier folds ``A && false``,
    ``A || true`` and a ``select`` on a constant predicate, so the branch not taken
    (here summing the sharded rows: an all-reduce) is never compiled."""

    def guarded(x, t):
        return jax.lax.cond(guard(t), lambda x: x * jnp.sum(x), lambda x: x * 2.0, x)

    predicted, compiled = predicted_and_compiled(guarded, (ones(8, 4), np.float32(1.0)),
                                                 (P("data"), P()), P("data"))
    assert predicted == compiled == {}


def test_branch_on_a_flag_the_argument_decides_is_kept():
    """The same guard with no constant deciding it: both branches compile, and the
    sum's all-reduce with them."""

    def guarded(x, t):
        return jax.lax.cond(jnp.logical_and(t > 0.0, True), lambda x: x * jnp.sum(x),
                            lambda x: x * 2.0, x)

    predicted, compiled = predicted_and_compiled(guarded, (ones(8, 4), np.float32(1.0)),
                                                 (P("data"), P()), P("data"))
    assert predicted == compiled == {"all-reduce": 4}


@pytest.mark.parametrize("grid, spec", [
    (((2, 4), ("data", "model")), P("data", "model")),
    (((4, 2), ("data", "model")), P("data", "model")),
    (((4, 2), ("data", "model")), P(None, "model")),
])
@pytest.mark.parametrize("op", ["concatenate", "sort", "argsort"])
def test_an_op_needing_its_dimension_whole_moves_its_tiles(grid, spec, op):
    """A concatenate or sort along a sharded dimension: XLA moves that dimension's tiles
    to the first other dimension the merged tile count divides (after its own axes),
    runs the op there and moves them back, an all-to-all each way
    (``GetFirstTargetDimToMoveShardingTiles``, ``MoveAndMergeShardingTiles``)."""
    fun = {"concatenate": lambda x, y: jnp.concatenate([x, y], axis=1),
           "sort": lambda x, y: jnp.sort(x + y, axis=1),
           "argsort": lambda x, y: jnp.argsort(x * y, axis=1)}[op]
    x = (np.arange(16 * 32) * 37 % 101).reshape(16, 32).astype(np.float32)
    predicted, compiled = predicted_and_compiled(fun, (x, ones(16, 32)), (spec, spec), spec,
                                                 grid=mesh(*grid))
    assert predicted == compiled
    assert "all-to-all" in compiled and "all-gather" not in compiled


def test_a_rotation_is_not_a_concatenate_moving_its_tiles():
    """``jnp.roll`` concatenates two slices of one value: XLA partitions that rotation
    with collective-permutes, not by moving the concatenated dimension's tiles."""
    predicted, compiled = predicted_and_compiled(lambda x: jnp.roll(x, 3, axis=0),
                                                 (ones(16, 32),), (P("data", "model"),),
                                                 P("data", "model"))
    assert predicted == compiled == {"collective-permute": 3 * 16 * 4}


def test_window_ops_gathering_one_value_the_same_way_gather_it_once():
    """A cumulative sum and a cumulative max along one sharded axis of one value: each
    reduce_window's window spans the axis, so its operand is gathered there; XLA
    gathers the value once and both read it (the cumulative sum along the other axis
    gathers it another way)."""
    predicted, compiled = predicted_and_compiled(
        lambda x: (jnp.cumsum(x, axis=1), jax.lax.cummax(x, axis=1), jnp.cumsum(x, axis=0)),
        (ones(16, 64),), (P("data", "model"),), grid=mesh((2, 4)))
    assert predicted == compiled == {"all-gather": 3072}


@pytest.mark.parametrize("grid, x_spec, w_spec, out", [
    # attention's output projection: heads on one axis, head features on another
    (((2, 2, 2), ("data", "fsdp", "tensor")), P("data", None, "tensor", "fsdp"),
     P("tensor", "fsdp", None), None),
    (((4, 2), ("a", "b")), P(None, None, "b", "a"), P("b", "a", None), None),
    (((4, 2), ("a", "b")), P(None, None, "a", "b"), P("a", "b", None), P()),
    # one contracting dimension over two axes: one all-reduce
    (((4, 2), ("a", "b")), P(None, None, ("b", "a")), P(("b", "a")), None),
])
def test_a_dot_sums_each_sharded_contracting_dimension_on_its_own(grid, x_spec, w_spec,
                                                                   out):
    """``AllReduceAlongShardingDims``: XLA sums a dot's partial sums one contracting
    dimension at a time, an all-reduce of the whole result per sharded dimension, where
    one all-reduce over all their axes would move the buffer once."""
    contract_two = lambda x, w: jnp.einsum("bthd,hdf->btf", x, w)
    contract_one = lambda x, w: jnp.einsum("btk,k->bt", x, w)
    if len(w_spec) == 1:
        fun, args = contract_one, (ones(8, 8, 32), ones(32))
    else:
        fun, args = contract_two, (ones(8, 8, 4, 8), ones(4, 8, 32))
    predicted, compiled = predicted_and_compiled(fun, args, (x_spec, w_spec), out,
                                                 grid=mesh(*grid))
    assert predicted == compiled


def test_a_weight_gradient_over_batch_and_sequence_axes_sums_each_on_its_own():
    """The weight gradient of tokens split over ``data`` (batch) and ``fsdp`` (sequence):
    two contracting dimensions, two all-reduces of the whole gradient."""
    grid = mesh((2, 2, 2), ("data", "fsdp", "tensor"))
    predicted, compiled = predicted_and_compiled(
        lambda x, dy: jnp.einsum("bthd,btf->hdf", x, dy), (ones(8, 8, 4, 8), ones(8, 8, 32)),
        (P("data", "fsdp"), P("data", "fsdp", "tensor")), P(None, None, "tensor"), grid=grid)
    assert predicted == compiled == {"all-reduce": 4096}


@pytest.mark.parametrize("grid, specs, out, expected", [
    # experts on fsdp, tokens on data: the expert dimension moves to the free axis
    # (model) as the groups take (data, fsdp), then is gathered in the groups
    (((2, 2, 2), ("data", "fsdp", "model")), (P(("data", "fsdp")), P("fsdp", "data")),
     P(("data", "fsdp")), {"collective-permute": 4096, "all-gather": 8192}),
    (((4, 2), ("data", "model")), (P("data"), P("model", "data")), P("data"),
     {"all-gather": 8192}),
    (((2, 4), ("data", "model")), (P("data"), P("model", "data")), P("data"),
     {"all-gather": 16384}),
])
def test_dot_with_batch_split_differently_moves_an_operand_to_the_result_groups(
        grid, specs, out, expected):
    """A MoE combine ``gsec,egcd->gsd`` whose operands split the batch ``g``
    differently: ``PartitionDotGroupOnBatch`` groups the devices as the result splits
    ``g`` and moves ``egcd`` there (``reshard_to_output_batch``) before the dot."""
    predicted, compiled = predicted_and_compiled(
        lambda d, y: jnp.einsum("gsec,egcd->gsd", d, y),
        (ones(8, 16, 4, 4), ones(4, 8, 4, 64)), specs, out, mesh(*grid))
    assert predicted == compiled == expected


@pytest.mark.parametrize("grid, w_spec, out", [
    (((2, 4), ("data", "model")), P(None, "model"), P("data", None, None, "model")),
    (((4, 2), ("data", "model")), P(None, "model"), P("data", None, None, "model")),
    (((2, 2, 2), ("data", "fsdp", "model")), P(None, ("fsdp", "model")),
     P("data", None, None, ("fsdp", "model"))),
])
def test_reshape_splitting_a_dimension_before_its_sharded_factor_gathers_it(grid, w_spec, out):
    """A fused qkv projection ``[b, s, 3*h*d]`` split as ``[b, s, 3, h, d]`` with the
    heads sharded: the axes on ``3*h*d`` split its major factor 3, not the heads, so
    the projection is gathered and each device slices its heads (the axes a
    dimension holds fill its factors major to minor)."""
    predicted, compiled = predicted_and_compiled(
        lambda x, w: (x @ w).reshape(8, 32, 3, 8, 8), (ones(8, 32, 64), ones(64, 192)),
        (P("data"), w_spec), out, mesh(*grid))
    assert predicted == compiled
    assert set(compiled) == {"all-gather"}


@pytest.mark.parametrize("in_loop", [False, True])
def test_a_branch_gathers_again_what_its_parent_gathered(in_loop):
    """A value gathered outside a cond and again inside one of its branches: XLA makes
    the branch a computation of its own, where the value is another instruction (the
    branch's parameter) with its own reshard cache, so it gathers twice (as in a
    checkpointed while loop's backward, which branches on the step)."""
    def outer_products(g, z, acc, flag):
        y = jnp.einsum("bi,bj->bij", g, z)
        out = jax.lax.cond(flag, lambda: acc + jnp.einsum("bi,bj->bij", g * 2, z), lambda: acc)
        return y + out

    def fun(g, z, acc, flag):
        if not in_loop:
            return outer_products(g, z, acc, flag)
        return jax.lax.fori_loop(0, 2, lambda i, a: outer_products(g, z, a, flag), acc)

    spec = P("data", "model")
    predicted, compiled = predicted_and_compiled(
        fun, (ones(16, 32), ones(16, 32), ones(16, 32, 32), np.array(True)),
        (spec, spec, P("data", "model", None), P()), P("data", "model", None))
    assert predicted == compiled
    assert compiled["all-gather"] == 2 * 512


def _ravel(a, b, c):
    return jnp.concatenate([a.reshape(1), b.reshape(1), c])


def _ravel_round_trip(a, b, theta):
    flat = _ravel(a, b, theta) * jnp.arange(18.0)
    x, y, z = flat[0].reshape(()), flat[1:2].reshape(()), flat[2:]
    m = _ravel(x * 2.0, y + 1.0, z * 3.0)
    return jnp.dot(m * 0.5, m)


@pytest.mark.parametrize("fun, grid", [
    (_ravel, ((8,), ("data",))),
    (lambda a, b, c: jnp.dot(_ravel(a, b, c), _ravel(a, b, c)), ((8,), ("data",))),
    # ravel_pytree's flat vector unravelled and ravelled again (an HMC step's momentum)
    (_ravel_round_trip, ((8,), ("data",))),
    (_ravel_round_trip, ((2, 4), ("data", "model"))),
])
def test_a_reshape_made_replicated_is_not_gathered_back(fun, grid):
    """A replicated scalar reshaped to a dimension of one that propagation shards: XLA's
    reshape handler reshapes it as its operand is sharded (whole) and slices the
    result, and the reshard cache keeps the whole one for the sliced one, so the
    concatenate that needs it whole all-reduces nothing."""
    predicted, compiled = predicted_and_compiled(
        fun, (np.float32(1), np.float32(2), np.arange(16, dtype=np.float32)),
        (P(), P(), P("data")), None, mesh(*grid))
    assert predicted == compiled
