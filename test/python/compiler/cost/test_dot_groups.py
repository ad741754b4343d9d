"""Where XLA's dot handler moves the operand it replicates across device groups
(the layouts checked against compiled HLO in bench/comm_report.py's HANDWRITTEN cases)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P

from shardc.compiler import jit
from shardc.compiler.cost.dot_groups import matching_operand, regrouped_operand
from shardc.compiler.cost.op_comm import op_communication
from shardc.compiler.sharding.axes import full_axis
from shardc.compiler.sharding.rule import OpShardingRule
from shardc.compiler.sharding.tensor import DimSharding, Tensor, TensorSharding

MESH = (("data", 2), ("fsdp", 2), ("model", 2))
SIZES = dict(MESH)
# km,kn->mn on (16, 32) x (16, 32): factors m=0, n=1, k=2 (contracted).
TRANSPOSED_DOT = OpShardingRule(
    factor_sizes=(32, 32, 16),
    operand_mappings=(((2,), (0,)), ((2,), (1,))),
    result_mappings=(((0,), (1,)),),
    reduction_factors=(2,),
)


def tensor(*dims, shape=(16, 32)):
    sharding = TensorSharding("mesh", tuple(
        DimSharding(tuple(full_axis(a, SIZES[a]) for a in d), True) for d in dims))
    return Tensor(shape, 4, sharding)


def moved(lhs, rhs, out):
    found = regrouped_operand(TRANSPOSED_DOT, [tensor(*lhs), tensor(*rhs)],
                              [tensor(*out, shape=(32, 32))], MESH)
    if found is None:
        return None
    index, sharding, _ = found
    return index, [[a.name for a in d.axes] for d in sharding.dims]


def test_other_operand_swaps_the_group_axis_with_its_replicated_axis():
    # Grouped on model; the rhs replicates fsdp only: its model dimension takes fsdp.
    assert moved([["data"], ["model"]], [["data"], ["model"]], [["model"], []]) == (
        1, [["data"], ["fsdp"]])
    # Symmetric: grouped on the rhs's model, the lhs moves.
    assert moved([["data"], ["model"]], [["data"], ["model"]], [[], ["model"]]) == (
        0, [["data"], ["fsdp"]])


def test_other_operand_takes_every_replicated_axis():
    # The rhs replicates data and fsdp: its model dimension takes both (more tiles).
    assert moved([[], ["model"]], [[], ["model"]], [["model"], []]) == (1, [[], ["data", "fsdp"]])


def test_nothing_moves_when_the_groups_already_hold_every_tile():
    assert moved([["data"], ["model"]], [["data"], ["fsdp"]], [["model"], []]) is None


def test_an_other_operand_no_grouping_fits_moves_where_the_result_implies():
    # Fully tiled, on no group axis alone: XLA moves it where the result (its n) and
    # the matching operand (the contraction k) imply, then groups it there.
    assert moved([["data"], ["model"]], [["data"], ["fsdp", "model"]], [["model"], []]) == (
        1, [["data"], []])
    # Nothing implied (the matching operand's contraction unsharded): gathered whole.
    assert moved([[], ["model"]], [["data"], ["fsdp", "model"]], [["model"], []]) == (
        1, [[], []])


def test_not_modelled_cases_keep_the_plain_reshard():
    # Both operands match the result.
    assert moved([["data"], ["model"]], [["data"], ["fsdp"]], [["model"], ["fsdp"]]) is None
    # The matching operand holds the result's axes in another order.
    assert moved([["data"], ["fsdp", "model"]], [["data"], []],
                 [["model", "fsdp"], []]) is None


def test_op_communication_permutes_before_the_gather():
    found = op_communication(TRANSPOSED_DOT, [tensor(["data"], ["model"]),
                                              tensor(["data"], ["model"])],
                             [tensor(["model"], [], shape=(32, 32))], MESH)
    steps = [(c.operand, c.collective.kind, c.collective.axes, c.collective.bytes_per_device)
             for c in found]
    # the permute's axes: those along which a tile's old and new devices differ
    # ([{data}, {model}] -> [{data}, {fsdp}] keeps every tile's data coordinate)
    assert steps == [
        (1, "collective-permute", ("fsdp", "model"), 512),
        (1, "all-gather", ("fsdp",), 1024),
        (None, "all-reduce", ("data",), 2048),
    ]


def test_matching_operand_is_the_side_grouped_on():
    # h^T @ g with the result [model, {}]: only the lhs's m matches (model), the
    # rhs's n is unsharded in the result.
    found = matching_operand(TRANSPOSED_DOT, [tensor(["data"], ["model"]),
                                              tensor(["data"], ["model"])],
                             [tensor(["model"], [], shape=(32, 32))])
    assert found == (0, ("model",))
    # Both sides match: XLA groups on the lhs when its tile count times the rhs's
    # shard bytes is the smaller (2 * 512 < 2 * 1024), else on the rhs.
    out = tensor(["model"], ["fsdp"], shape=(32, 32))
    assert matching_operand(TRANSPOSED_DOT, [tensor([], ["model"]),
                                             tensor(["data"], ["fsdp"])], [out]) == (0, ("model",))
    assert matching_operand(TRANSPOSED_DOT, [tensor(["data"], ["model"]),
                                             tensor([], ["fsdp"])], [out]) == (1, ("fsdp",))
    # No non-contracting dimension sharded in the result: no grouping.
    assert matching_operand(TRANSPOSED_DOT, [tensor(["data"], []), tensor(["data"], [])],
                            [tensor([], [], shape=(32, 32))]) is None


# --------------------------------------------------------------------------- vs XLA

def _contract_minor(a, b):
    """``a @ b.T`` as one dot_general (what a weight's backward pass emits)."""
    return lax.dot_general(a, b, (((1,), (1,)), ((), ())))


def _dotted_twice(a, b):
    return _contract_minor(a, b), 2 * _contract_minor(a, b)


def _contract_major(a, b):
    """``a.T @ b`` as one dot_general (a weight gradient)."""
    return lax.dot_general(a, b, (((0,), (0,)), ((), ())))


def _conv(x, w):
    return lax.conv_general_dilated(x, w, (1, 1), "SAME",
                                    dimension_numbers=("NHWC", "HWIO", "NHWC"))


def _conv_and_weight_gradient(h, g, w):
    """A convolution and its weight gradient (``jax.vjp``'s transposed convolution)."""
    return _conv(h, w), jax.vjp(lambda w: _conv(h, w), w)[1](g)[0]


# A value two dots reshard alike: XLA reuses the reshard only when both make it in the
# same device groups (its reshard cache is per grouping).
REUSE_CASES = {
    # w2 [model, data] gathered over data: before grouping on h's data (forward), inside
    # the groups on w2's own model (backward, ``g @ w2.T`` as one dot): twice.
    "forward and backward through one weight": (
        lambda h, g, w: (h @ w, _contract_minor(g, w)), [(16, 64), (16, 32), (64, 32)],
        (P("data", "model"), P("data"), P("model", "data")),
        (P("data"), P("data", "model")), 8192),
    # Two backward dots, both grouped on w2's model: gathered once.
    "two backward dots through one weight": (
        lambda g, g2, w: (_contract_minor(g, w), _contract_minor(g2, w)),
        [(16, 32), (16, 32), (64, 32)], (P("data"), P("data"), P("model", "data")),
        (P("data", "model"), P("data", "model")), 4096),
    # h [data, model] gathered over data: before grouping on w's data (forward), inside
    # the groups on h's own model (the weight gradient h^T @ g): twice.
    "activation in the forward pass and the weight gradient": (
        lambda h, g, w: (h @ w, _contract_major(h, g)), [(16, 64), (16, 32), (64, 32)],
        (P("data", "model"), P(None, "data"), P("model", "data")),
        (P(None, "data"), P("model", "data")), 4096),
    # A convolution is a dot to XLA's handler: h [data, ..., model] gathered over model
    # inside the groups on its own batch (the forward convolution, grouped on h: 4 tiles
    # times w's shard bytes is less than 2 tiles times h's), outside any group for the
    # weight gradient's convolution: twice (w gathered over data once).
    "activation in a convolution and its weight gradient": (
        _conv_and_weight_gradient, [(4, 16, 16, 16), (4, 16, 16, 16), (3, 3, 16, 16)],
        (P("data", None, None, "model"), P("data", None, None, "model"),
         P(None, None, "data", "model")),
        (P("data", None, None, "model"), P(None, None, "data", "model")), 2 * 16384 + 4608),
    # x . x^T (one value on both sides, as a vmapped pairwise cost makes it): XLA's
    # partitioner copies the right-hand side, whose gather over data is the copy's own,
    # and x . y^T gathers x itself: twice.
    "a value dotted with itself and with another": (
        lambda x, y: (_contract_minor(x, x), _contract_minor(x, y)), [(32, 8), (24, 8)],
        (P("data", "model"), P("data", "model")), (P("data"), P(None, "data")), 2 * 512),
    # Its left-hand side is the value itself: gathered once for both dots.
    "a value dotted with itself, its left-hand side gathered": (
        lambda x, y: (_contract_minor(x, x), _contract_minor(x, y)), [(32, 8), (24, 8)],
        (P("data", "model"), P("data", "model")), (P(None, "data"), P(None, "data")), 512),
    # Two selects of x whose branches are both x (a masked cost matrix's pattern): XLA's
    # import folds each to x, so both dots are x . x^T and gather their copies: twice.
    "a value through two selects of itself, dotted twice": (
        lambda x, y: _dotted_twice(lax.select(x > 1, x, x), lax.select(x > 2, x, x)),
        [(32, 8), (24, 8)], (P("data", "model"), P("data", "model")),
        (P("data"), P("data")), 2 * 512),
}


@pytest.mark.parametrize("name", REUSE_CASES)
def test_reshards_are_reused_only_inside_the_same_groups(name):
    fun, shapes, ins, outs, gathered = REUSE_CASES[name]
    mesh = jax.make_mesh((4, 2), ("data", "model"), axis_types=(AxisType.Auto,) * 2)
    ins = tuple(NamedSharding(mesh, spec) for spec in ins)
    outs = tuple(NamedSharding(mesh, spec) for spec in outs)
    rand = np.random.default_rng(0)
    args = [jax.device_put(rand.standard_normal(s).astype(np.float32), i)
            for s, i in zip(shapes, ins)]
    lowered = jit(fun, in_shardings=ins, out_shardings=outs).lower(*args)
    predicted = {k: t.bytes_per_device for k, t in lowered.comm_report().totals().items()}
    compiled = {k: c.bytes_per_device for k, c in lowered.compile().collectives().items()}
    assert predicted == compiled
    assert compiled["all-gather"] == gathered


def test_the_moved_operand_may_keep_its_contraction_sharded_inside_the_groups():
    """Newton-Schulz's ``A @ A`` (``A = X @ X.T``, ``X`` ``[{"model"}, {"data"}]``): the
    result keeps the lhs's rows on ``model``, so XLA groups on ``model`` and moves the
    rhs (``[{"model"}, {}]``) to ``[{"data"}, {}]`` (a collective-permute). Inside each
    group the rhs holds the contraction on ``data`` and has more elements than the
    result: XLA slices the lhs to match and all-reduces the partial sums over ``data``
    instead of all-gathering the rhs."""
    mesh = jax.make_mesh((4, 2), ("data", "model"), axis_types=(AxisType.Auto,) * 2)

    def square(x):
        a = x @ x.T
        return a @ a

    x = jax.device_put(np.arange(64 * 128, dtype=np.float32).reshape(64, 128) / 8192,
                       NamedSharding(mesh, P("model", "data")))
    lowered = jit(square).lower(x)
    predicted = {k: t.bytes_per_device for k, t in lowered.comm_report().totals().items()
                 if t.count}
    compiled = lowered.compile()
    assert predicted == {k: c.bytes_per_device
                         for k, c in compiled.collectives().items() if c.count}
    assert predicted == {"all-gather": 8192, "all-reduce": 16384, "collective-permute": 4096}
    ours, theirs = compiled(x), jax.jit(square)(x)
    np.testing.assert_allclose(ours, theirs, rtol=1e-5)
    assert ours.sharding.is_equivalent_to(theirs.sharding, ours.ndim)


# gsec,egcd->gsd (an MoE combine): factors g=0, s=1, e=2, c=3, d=4; e and c contracted.
COMBINE = OpShardingRule(
    factor_sizes=(8, 32, 8, 8, 64),
    operand_mappings=(((0,), (1,), (2,), (3,)), ((2,), (0,), (3,), (4,))),
    result_mappings=(((0,), (1,), (4,)),),
    reduction_factors=(2, 3),
)


def _combine_moved(mesh, comb, experts, out):
    sizes = dict(mesh)

    def sharded(shape, *dims):
        return Tensor(shape, 4, TensorSharding("mesh", tuple(
            DimSharding(tuple(full_axis(a, sizes[a]) for a in d), True) for d in dims)))

    found = regrouped_operand(COMBINE, [sharded((8, 32, 8, 8), *comb),
                                        sharded((8, 8, 8, 64), *experts)],
                              [sharded((8, 32, 64), *out)], mesh)
    if found is None:
        return None
    return found.operand, found.on, [[str(a) for a in d.axes] for d in found.sharding.dims]


def test_batch_grouping_moves_a_contraction_on_the_batch_axes_to_idle_axes():
    # The result's batch g on data (8 groups); the experts hold e on data and
    # replicate model: g takes data, e moves to model (XLA's reshard_to_output_batch
    # takes the batch tiles out of the replication).
    mesh = (("data", 8), ("model", 8))
    assert _combine_moved(mesh, [["data"], [], [], []], [["data"], [], [], []],
                          [["data"], [], []]) == (
        1, "batch", [['"model"'], ['"data"'], [], []])
    # Fewer replicas than batch tiles (4x2): the contraction's tiles give way instead.
    mesh = (("data", 4), ("model", 2))
    assert _combine_moved(mesh, [["data"], [], [], []], [["data"], [], [], []],
                          [["data"], [], []]) == (1, "batch", [[], ['"data"'], [], []])
    # Replicas a multiple of the batch tiles but more (2x4): e takes model's major part.
    mesh = (("data", 2), ("model", 4))
    assert _combine_moved(mesh, [["data"], [], [], []], [["data"], [], [], []],
                          [["data"], [], []]) == (
        1, "batch", [['"model":(1)2'], ['"data"'], [], []])
    # Both operands' batch tilings alike: nothing moves before the groups.
    assert _combine_moved(mesh, [["data"], [], [], []], [[], ["data"], [], []],
                          [["data"], [], []]) is None


def _combine(comb, experts):
    return jnp.einsum("gsec,egcd->gsd", comb, experts)


def _batched_matmul(a, b):
    return jnp.einsum("bij,bjk->bik", a, b)


# Dots whose result is sharded on batch dimensions the other operand holds unsharded
# (XLA's PartitionDotGroupOnBatch), with the collectives XLA compiles.
BATCH_CASES = {
    # 2x4: the experts' e moves from data to model's major half (a collective-permute);
    # inside the groups the contraction is gathered (the combine's shard is the larger).
    "combine, replicas a multiple of the batch tiles": (
        (2, 4), _combine, [(4, 16, 4, 8), (4, 4, 8, 32)], (P("data"), P("data")),
        P("data"), {"collective-permute": 4096, "all-gather": 8192}),
    # 4x2: fewer replicas than batch tiles: the contraction's tiles give way (all-to-all).
    "combine, fewer replicas than batch tiles": (
        (4, 2), _combine, [(4, 16, 4, 8), (4, 4, 8, 32)], (P("data"), P("data")),
        P("data"), {"all-to-all": 4096}),
    # The rhs's non-contracting k gives way to the batch; its contraction stays on model.
    "batched matmul": (
        (4, 2), _batched_matmul, [(8, 16, 32), (8, 32, 16)],
        (P("data"), P(None, "model", "data")), P("data"),
        {"all-to-all": 2048, "all-reduce": 2048}),
}


# Dots grouped on one operand's non-contracting axes whose other operand XLA cannot
# group as it is: it moves where the result and the matching operand imply.
UNGROUPED_CASES = {
    # An FSDP weight [(data, model), {}] under activations [data]: nothing implies a
    # sharding for it (the contraction is unsharded in x), so it is gathered whole, not
    # kept on model for partial sums.
    "fsdp weight gathered whole": (
        (4, 2), jnp.matmul, [(32, 64), (64, 256)], (P("data"), P(("data", "model"))),
        P("data"), {"all-gather": 65536}),
    # Fully tiled over (data, model) on its rows under a [data, model] lhs: the rows
    # move to the lhs's contraction axis (data), then the partial sums are reduced.
    "weight gradient, rows on both axes": (
        (4, 2), _contract_major, [(32, 64), (32, 128)], (P("data", "model"),
                                                          P(("model", "data"))),
        P("model"), {"all-gather": 4096, "all-reduce": 16384, "collective-permute": 2048}),
}

# Dots whose result splits a batch dimension one operand holds unsharded, while the
# other operand's non-contracting split is the result's: XLA's first pass groups on
# that split (it moves no operand's groups), not on the batch.
NON_CONTRACTING_FIRST_CASES = {
    # An MoE expert matmul: the tokens' capacity g on model moves to data (its swap
    # with the replicated axis, a collective-permute), then the experts' e takes data
    # (an all-to-all) inside the model groups.
    "expert matmul, tokens split on the contraction's peer": (
        (4, 2), lambda x, w: jnp.einsum("egcd,edf->egcf", x, w),
        [(4, 8, 4, 64), (4, 64, 256)], (P(None, "model"), P("data", None, "model")),
        P("data", None, None, "model"), {"collective-permute": 8192, "all-to-all": 8192}),
}
def _compiles_as_predicted(shape, fun, shapes, ins, out, expected):
    mesh = jax.make_mesh(shape, ("data", "model"), axis_types=(AxisType.Auto,) * 2)
    ins = tuple(NamedSharding(mesh, spec) for spec in ins)
    rand = np.random.default_rng(0)
    args = [jax.device_put(rand.standard_normal(s).astype(np.float32), i)
            for s, i in zip(shapes, ins)]
    lowered = jit(fun, in_shardings=ins, out_shardings=NamedSharding(mesh, out)).lower(*args)
    predicted = {k: t.bytes_per_device for k, t in lowered.comm_report().totals().items()
                 if t.count}
    compiled = lowered.compile()
    assert predicted == {k: c.bytes_per_device
                         for k, c in compiled.collectives().items() if c.count}
    assert predicted == expected
    np.testing.assert_allclose(compiled(*args), jax.jit(fun)(*args), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", BATCH_CASES)
def test_batch_grouped_dots_match_xla(name):
    _compiles_as_predicted(*BATCH_CASES[name])


@pytest.mark.parametrize("name", UNGROUPED_CASES)
def test_ungrouped_other_operands_match_xla(name):
    _compiles_as_predicted(*UNGROUPED_CASES[name])


@pytest.mark.parametrize("name", NON_CONTRACTING_FIRST_CASES)
def test_non_contracting_grouping_before_a_batch_grouping_that_moves_matches_xla(name):
    _compiles_as_predicted(*NON_CONTRACTING_FIRST_CASES[name])


@pytest.mark.parametrize("out, reduces", [
    (P("data", "model"), [("model",), ("data",)]),   # two dimensions: minor-most first
    (P("model", "data"), [("data",), ("model",)]),
    (P(("data", "model")), [("data", "model")]),     # one dimension: one all-reduce
])
def test_partial_sums_sliced_on_several_dimensions_are_reduced_per_dimension(out, reduces):
    """``x @ w`` contracting over (data, model) on both sides: XLA all-reduces the whole
    result once per dimension the result is sliced on, then slices it."""
    mesh = jax.make_mesh((4, 2), ("data", "model"), axis_types=(AxisType.Auto,) * 2)
    ins = (NamedSharding(mesh, P(None, ("data", "model"))),
           NamedSharding(mesh, P(("data", "model"))))
    rand = np.random.default_rng(0)
    args = [jax.device_put(rand.standard_normal(s).astype(np.float32), i)
            for s, i in zip([(16, 256), (256, 32)], ins)]
    lowered = jit(jnp.matmul, in_shardings=ins, out_shardings=NamedSharding(mesh, out)
                  ).lower(*args)
    report = lowered.comm_report()
    assert [(e.kind, e.axes, e.bytes_per_device) for e in report.entries] == [
        ("all-reduce", axes, 16 * 32 * 4) for axes in reduces]
    compiled = lowered.compile().collectives()
    assert {k: (c.bytes_per_device, c.count) for k, c in compiled.items() if c.count} == {
        "all-reduce": (16 * 32 * 4 * len(reduces), len(reduces))}


def test_grouped_query_attention_with_fewer_kv_heads_than_the_model_axis():
    """GQA on (data 2, model 4) with 2 kv heads: ``x @ wk`` (``wk`` ``[{"data"}, {}]``)
    has its heads on ``"model":(1)2``. XLA groups on ``x``'s batch (``data``), permutes
    ``wk`` to ``[{"model"}, {}]``, gathers it whole over ``model`` and slices the heads;
    the backward pass's dots reuse both (one reshard cache per grouping, and the whole
    value ``Replicate`` cached)."""
    mesh = jax.make_mesh((2, 4), ("data", "model"), axis_types=(AxisType.Auto,) * 2)
    batch, seq, dim, heads, kv_heads, head_dim = 4, 8, 64, 4, 2, 16

    def loss(x, wq, wk, wv):
        q = (x @ wq).reshape(batch, seq, kv_heads, heads // kv_heads, head_dim)
        k = (x @ wk).reshape(batch, seq, kv_heads, head_dim)
        v = (x @ wv).reshape(batch, seq, kv_heads, head_dim)
        s = jnp.einsum("bqgrd,bkgd->bgrqk", q, k)
        return jnp.mean(jnp.einsum("bgrqk,bkgd->bqgrd", jax.nn.softmax(s, -1), v) ** 2)

    specs = (P("data"), P("data", "model"), P("data", None), P("data", None))
    shapes = [(batch, seq, dim), (dim, heads * head_dim), (dim, kv_heads * head_dim),
              (dim, kv_heads * head_dim)]
    rand = np.random.default_rng(0)
    args = [jax.device_put(rand.standard_normal(s).astype(np.float32), NamedSharding(mesh, p))
            for s, p in zip(shapes, specs)]
    fun = jax.grad(loss, argnums=(1, 2, 3))
    lowered = jit(fun).lower(*args)
    predicted = {k: (t.bytes_per_device, t.count)
                 for k, t in lowered.comm_report().totals().items() if t.count}
    compiled = lowered.compile()
    assert {k: b for k, (b, _) in predicted.items()} == {
        k: c.bytes_per_device for k, c in compiled.collectives().items() if c.count}
    assert predicted["collective-permute"] == (4096, 2)
    for ours, theirs in zip(compiled(*args), jax.jit(fun)(*args)):
        np.testing.assert_allclose(ours, theirs, rtol=1e-4, atol=1e-6)


def test_a_contraction_split_into_unequal_tile_counts_is_gathered():
    """An MoE weight gradient ``egcd,egcf->edf`` on 2x2x2: ``x`` splits the contracted
    ``g`` over (data, fsdp), ``y`` over data alone; no grouping on ``g`` matches, so XLA
    gathers both operands where the result implies (no partial sums of ``g``)."""
    mesh = jax.make_mesh((2, 2, 2), ("data", "fsdp", "model"), axis_types=(AxisType.Auto,) * 3)
    ins = (NamedSharding(mesh, P(None, ("data", "fsdp"))),
           NamedSharding(mesh, P("fsdp", "data", None, "model")))
    out = NamedSharding(mesh, P("fsdp", None, "model"))
    rand = np.random.default_rng(0)
    args = [jax.device_put(rand.standard_normal(s).astype(np.float32), i)
            for s, i in zip([(4, 8, 4, 64), (4, 8, 4, 256)], ins)]

    def fun(x, y):
        return jnp.einsum("egcd,egcf->edf", x, y)

    lowered = jit(fun, in_shardings=ins, out_shardings=out).lower(*args)
    predicted = {k: t.bytes_per_device for k, t in lowered.comm_report().totals().items()
                 if t.count}
    compiled = lowered.compile()
    assert predicted == {k: c.bytes_per_device
                         for k, c in compiled.collectives().items() if c.count}
    assert predicted == {"all-gather": 65536}
    np.testing.assert_allclose(compiled(*args), jax.jit(fun)(*args), rtol=1e-4, atol=1e-4)


def test_both_operands_matching_the_result_group_twice():
    """A vocab projection ``h @ e.T`` on 2x2x2, ``h`` ``[{"x"}, {}]`` and ``e.T``
    ``[{"x"}, {"y"}]``, the result ``[{"x"}, {"y"}]``: XLA groups on ``e.T``'s ``y``
    (the cheaper side), then inside on ``h``'s ``x``, moving ``e.T``'s contraction from
    ``x`` to the idle ``z`` (a collective-permute) and reducing over ``z``."""
    mesh = jax.make_mesh((2, 2, 2), ("x", "y", "z"), axis_types=(AxisType.Auto,) * 3)
    ins = (NamedSharding(mesh, P("x")), NamedSharding(mesh, P("y", "x")))
    out = NamedSharding(mesh, P("x", "y"))
    rand = np.random.default_rng(0)
    args = [jax.device_put(rand.standard_normal(s).astype(np.float32), i)
            for s, i in zip([(32, 64), (512, 64)], ins)]

    def fun(h, e):
        return h @ e.T

    lowered = jit(fun, in_shardings=ins, out_shardings=out).lower(*args)
    predicted = {k: t.bytes_per_device for k, t in lowered.comm_report().totals().items()
                 if t.count}
    compiled = lowered.compile()
    assert predicted == {k: c.bytes_per_device
                         for k, c in compiled.collectives().items() if c.count}
    assert predicted == {"collective-permute": 32768, "all-reduce": 16384}
    np.testing.assert_allclose(compiled(*args), jax.jit(fun)(*args), rtol=1e-4, atol=1e-4)


def _grouped_conv(groups):
    def conv(x, w):
        return lax.conv_general_dilated(x, w, (1, 1), "SAME", feature_group_count=groups,
                                        dimension_numbers=("NHWC", "HWIO", "NHWC"))
    return conv


def _predicted_as_compiled(fun, shapes, specs, out=None):
    """``fun`` on random arguments placed with ``specs`` on 4x2 (results with ``out``):
    the predicted bytes per kind, held equal to XLA's and the results to jax.jit's."""
    mesh = jax.make_mesh((4, 2), ("data", "model"), axis_types=(AxisType.Auto,) * 2)
    rand = np.random.default_rng(0)
    args = [jax.device_put(rand.standard_normal(s).astype(np.float32), NamedSharding(mesh, spec))
            for s, spec in zip(shapes, specs)]
    out = None if out is None else NamedSharding(mesh, out)
    lowered = jit(fun, out_shardings=out).lower(*args)
    predicted = {k: t.bytes_per_device for k, t in lowered.comm_report().totals().items()
                 if t.count}
    compiled = lowered.compile()
    assert predicted == {k: c.bytes_per_device
                         for k, c in compiled.collectives().items() if c.count}
    ours, theirs = compiled(*args), jax.jit(fun, out_shardings=out)(*args)
    np.testing.assert_allclose(ours, theirs, rtol=1e-4, atol=1e-4)
    assert ours.sharding.is_equivalent_to(theirs.sharding, ours.ndim)
    return predicted


@pytest.mark.parametrize("groups, kernel_in, ins, gathered", [
    # 4 groups of 8 input features: XLA's dot handler has no partitioning for it and
    # gathers the input (and a sharded kernel) whole, batch and features alike: each
    # all-gather counted by the bytes it leaves on a device.
    (4, 8, (P("data"), P()), 8 * 16 * 16 * 32 * 4),
    (4, 8, (P("data", None, None, "model"), P(None, None, None, "model")),
     2 * 16 * 16 * 32 * 4 + 8 * 16 * 16 * 32 * 4 + 3 * 3 * 8 * 32 * 4),
    # Depthwise (one input feature per group): partitioned, nothing gathered.
    (32, 1, (P("data"), P()), 0),
])
def test_grouped_convolution_with_several_input_features_is_not_partitioned(
        groups, kernel_in, ins, gathered):
    predicted = _predicted_as_compiled(_grouped_conv(groups),
                                       [(8, 16, 16, 32), (3, 3, kernel_in, 32)], ins)
    assert predicted.get("all-gather", 0) == gathered


def _upsample(x, w):
    return lax.conv_transpose(x, w, (2, 2), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"))


def _downsample(x, w):
    return lax.conv_general_dilated(x, w, (2, 2), "SAME",
                                    dimension_numbers=("NHWC", "HWIO", "NHWC"))


@pytest.mark.parametrize("fun, shape, expected", [
    # Input features on model, a replicated kernel: XLA keeps partial sums only where
    # the input has more elements than the result in a batch group. An upsampling
    # convolution's result is larger (its dilated dimensions outgrow the rule's
    # factors): the input's features are gathered.
    (_upsample, (8, 8, 8, 16), {"all-gather": 2 * 8 * 8 * 16 * 4}),
    (_downsample, (8, 16, 16, 16), {"all-reduce": 2 * 8 * 8 * 8 * 4}),
])
def test_a_contraction_against_a_replicated_kernel_weighs_the_whole_result(fun, shape, expected):
    predicted = _predicted_as_compiled(fun, [shape, (3, 3, 16, 8)],
                                       (P("data", None, None, "model"), P()))
    assert predicted == expected


def _depthwise_kernel_gradient(x, g):
    """A depthwise 3x3 kernel's gradient: a convolution with 32 batch groups."""
    kernel = jnp.zeros((3, 3, 1, x.shape[-1]))
    return jax.vjp(lambda w: _grouped_conv(x.shape[-1])(x, w), kernel)[1](g)[0]


@pytest.mark.parametrize("specs, gathered, reduced", [
    # The gradient's channels on model only (part of the devices), the input's not:
    # XLA gathers them and all-reduces the whole kernel, sliced afterwards.
    ((P("data"), P("data", None, None, "model")), 2 * 16 * 16 * 32 * 4, 3 * 3 * 32 * 4),
    # Both split alike: the groups stay split, half the kernel is all-reduced.
    ((P("data", None, None, "model"), P("data", None, None, "model")), 0, 3 * 3 * 16 * 4),
    ((P("data", None, None, "model"), P("data")), 0, 3 * 3 * 16 * 4),
])
def test_a_batch_grouped_convolution_split_on_part_of_the_devices(specs, gathered, reduced):
    predicted = _predicted_as_compiled(_depthwise_kernel_gradient,
                                       [(8, 16, 16, 32), (8, 16, 16, 32)], specs)
    assert (predicted.get("all-gather", 0), predicted.get("all-reduce", 0)) == (gathered, reduced)


@pytest.mark.parametrize("shapes, specs, out, permuted", [
    # A CG step's a @ p: the result wants data, which the contraction holds. Shardy's
    # explicit-reshards step (run inside XLA) computes it on model as a implies and
    # reshards the small result after: a permute of it, no gather of a.
    (((64, 64), (64,)), (P("model", "data"), P("data")), P("data"), 64),
    (((256, 64), (64, 32)), (P("model", "data"), P("data")), P("data"), 8192),
    # The result larger than the operand implying otherwise: computed as declared.
    (((64, 16), (16, 64)), (P("model", "data"), P("data")), P("data"), 0),
])
def test_a_dot_conflicting_with_its_result_is_computed_as_its_operands_imply(
        shapes, specs, out, permuted):
    predicted = _predicted_as_compiled(jnp.matmul, shapes, specs, out)
    assert predicted.get("collective-permute", 0) == permuted


@pytest.mark.parametrize("shape, names", [((2, 4), ("x", "y")), ((8,), ("x",))])
def test_result_sharded_over_the_contraction_is_summed_on_its_replicas(shape, names):
    """An FSDP projection: the activations' features and the weight's rows sharded over
    ``x``, the result's batch over ``x`` too. Replicated over ``y`` (a multiple of the
    contraction's devices: 4 of 2), XLA sums each batch tile on the replicas (an
    all-reduce of the result shard) and permutes the tiles to the ``x`` devices; the
    prediction all-reduced the unsliced result (32768 bytes, compiled 16384 + a
    16384-byte permute). On ``x`` alone (no replicas) it all-reduces unsliced."""
    mesh = jax.make_mesh(shape, names, axis_types=(AxisType.Auto,) * len(names))
    x = jax.device_put(np.ones((8, 32, 128), np.float32), NamedSharding(mesh, P(None, None, "x")))
    w = jax.device_put(np.ones((128, 32), np.float32), NamedSharding(mesh, P("x")))
    lowered = jit(lambda x, w: x @ w, out_shardings=NamedSharding(mesh, P("x"))).lower(x, w)
    predicted = {k: t.bytes_per_device for k, t in lowered.comm_report().totals().items()
                 if t.count}
    compiled = {k: c.bytes_per_device for k, c in lowered.compile().collectives().items()
                if c.count}
    assert predicted == compiled
    assert ("collective-permute" in compiled) == (len(shape) == 2)


def _weight_gradient(mesh, a_spec, g_spec):
    """``bsd,bse->de`` (a weight's gradient: batch and sequence contracted) on 2x4,
    the result replicated: predicted and compiled collectives, bytes per device."""
    ins = (NamedSharding(mesh, a_spec), NamedSharding(mesh, g_spec))
    args = [np.ones((16, 64, 256), np.float32)] * 2
    lowered = jit(lambda a, g: jnp.einsum("bsd,bse->de", a, g), in_shardings=ins,
                  out_shardings=NamedSharding(mesh, P()), mesh=mesh).lower(*args,
                                                                          propagate=False)
    predicted = {k: t.bytes_per_device for k, t in lowered.comm_report().totals().items()
                 if t.count}
    compiled = {k: c.bytes_per_device for k, c in lowered.compile().collectives().items()
                if c.count}
    return predicted, compiled


def test_an_operand_contracted_over_every_device_takes_the_other_to_its_tiles():
    """A contraction one operand splits over every device (batch on data, sequence on
    model) is partitioned as that operand holds it: XLA's dot handler reshards the other
    operand to match (an all-to-all where it splits the batch over both axes) and sums
    the partial products, before the last resort that would gather both (a 32-layer
    Llama-like step with its batch and sequence split so had been modelled 2.6x XLA's
    collective bytes, every weight gradient an all-gather XLA never makes)."""
    mesh = jax.make_mesh((2, 4), ("data", "model"), axis_types=(AxisType.Auto,) * 2)
    predicted, compiled = _weight_gradient(mesh, P("data", "model"), P("data"))
    assert predicted == compiled == {"all-reduce": 524288}
    predicted, compiled = _weight_gradient(mesh, P("data", "model"), P(("data", "model")))
    assert "all-gather" not in predicted and "all-gather" not in compiled
    assert predicted["all-to-all"] == compiled["all-to-all"] == 131072
    # Left open: the partial sums' all-reduce, which XLA makes over both axes at once
    # (262144 B) and the model per axis (524288 B).
