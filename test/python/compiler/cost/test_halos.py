"""Halo exchanges of windowed reads of sharded dimensions (``cost.halos``), each held to
what XLA compiles: ``Lowered.comm_report()``'s bytes per device per collective kind
equal ``Compiled.collectives()``'s on 8 CPU devices."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from comm_comparison import mesh, predicted_and_compiled
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from shardc.compiler import jit
from shardc.compiler.cost.halos import WindowDim, windowed_halos

NHWC = ("NHWC", "HWIO", "NHWC")


def matrix(rows, cols, dtype=np.float32):
    return (np.arange(rows * cols) % 97).reshape(rows, cols).astype(dtype)


GRID_2x4 = ((2, 4), ("data", "model"))
GRID_8 = ((8,), ("model",))


@pytest.mark.parametrize("grid, spec, fun, cp", [
    # one neighbour's halo on the left: x[:, 1:61] over 4 shards of 16
    (GRID_2x4, P("data", "model"), lambda x: x[:, 1:61], 64),
    # a window over the middle: each shard reads rows of two others (ExchangeHaloCompact)
    (GRID_2x4, P("data", "model"), lambda x: x[:, 5:37], 608),
    (GRID_8, P(None, "model"), lambda x: x[:, 5:37], 768),
    # a replicated operand is first sliced to the result's sharding, then exchanged
    (GRID_2x4, P(), lambda x: x[:, 4:60], 256),
    # a stride lines windows up with the shards: no halo
    (GRID_2x4, P("data", "model"), lambda x: x[:, 1::2], 0),
])
def test_slice_of_a_sharded_dimension(grid, spec, fun, cp):
    """``HandleSlice`` reads a slice as a window of size one (stride the slice's,
    padding ``-start`` / ``limit - size``) over the operand resharded to the result's
    sharding: the halos each shard lacks come from its neighbours."""
    grid = mesh(*grid)
    predicted, compiled = predicted_and_compiled(
        fun, (matrix(16, 64),), (spec,), P(*([None] * (len(grid.shape) - 1)), "model")
        if spec == P() else spec, grid)
    assert predicted == compiled
    assert compiled.get("collective-permute", 0) == cp


@pytest.mark.parametrize("grid, spec, fun, cp", [
    # fewer windows than shards: XLA drops the shards right of the useful input
    # (ReshardAsWindowedInput): x[:, 17:18] exchanges between the first two only
    (GRID_2x4, P("data", "model"), lambda x: x[:, 17:18], 64),
    (GRID_8, P(None, "model"), lambda x: x[:, 40:41], 64),
    # ... and the shards without output between the first and the useful input
    (GRID_8, P(None, "model"), lambda x: x[:, 40:42], 128),
    (GRID_8, P(None, "model"), lambda x: x[:, 9:30:8], 64),
    (GRID_8, P(None, "model"), lambda x: x[:, 57:64], 448),
    (GRID_8, P("model"), lambda x: x[13:15], 768),
])
def test_slice_with_fewer_windows_than_shards(grid, spec, fun, cp):
    grid = mesh(*grid)
    predicted, compiled = predicted_and_compiled(fun, (matrix(16, 64),), (spec,), None, grid)
    assert predicted == compiled
    assert compiled.get("collective-permute", 0) == cp


@pytest.mark.parametrize("grid, padding, dtype, cp", [
    (GRID_2x4, (4, 4), np.float32, 128),   # a halo each side
    (GRID_2x4, (1, 7), np.float32, 160),   # the right halo only
    (GRID_8, (1, 15), np.float32, 576),    # reaching past the neighbour (compact)
    ((4, 2), (1, 3), jnp.bfloat16, 16),    # bf16 moved as f32 on XLA:CPU
])
def test_pad_of_a_sharded_dimension(grid, padding, dtype, cp):
    """A pad is a window of size one padded by the edge padding; each result shard
    reads its rows from the operand shards around it."""
    if grid != GRID_2x4 and grid != GRID_8:
        grid = (grid, ("data", "model"))
    grid = mesh(*grid)
    spec = P("data", "model") if len(grid.shape) == 2 else P(None, "model")
    predicted, compiled = predicted_and_compiled(
        lambda x: jnp.pad(x, ((0, 0), padding)), (matrix(16, 32, dtype),), (spec,), spec, grid)
    assert predicted == compiled == {"collective-permute": cp}


@pytest.mark.parametrize("shape, padding, expected", [
    # two shards: the left halo reaches as far as the last shard, whose permute has no
    # source-target pair (XLA makes zeros of it): one permute of the neighbour's shard
    ((4, 2), (128, 0), {"collective-permute": 4096}),
    ((4, 2), (0, 128), {"collective-permute": 4096}),
    # four shards: the halo is beyond the neighbours, so XLA all-gathers the windowed
    # dimension and pads and slices locally
    ((2, 4), (128, 0), {"all-gather": 16384}),
    ((2, 4), (3, 189), {"all-gather": 16384}),
    ((2, 4), (8, 56), {"collective-permute": 10240}),
    ((1, 8), (100, 28), {"collective-permute": 12288}),
    ((1, 8), (160, 32), {"all-gather": 32768}),
])
def test_pad_far_from_the_operand_shards(shape, padding, expected):
    """The fused-qkv gradient's pads (``q``, ``k``, ``v`` padded back into ``3 d``)
    read an operand shard far from the result's: ``ExchangeHalo``'s permutes run only
    between shards that exist, and a halo it cannot exchange makes
    ``ReshardAsWindowedInput`` replicate the windowed dimensions first."""
    grid = mesh(shape, ("data", "model"))
    spec = P("data", None, "model")
    x = np.arange(8 * 16 * 64, dtype=np.float32).reshape(8, 16, 64)
    predicted, compiled = predicted_and_compiled(
        lambda a: jnp.pad(a, ((0, 0), (0, 0), padding)), (x,), (spec,), spec, grid)
    assert predicted == compiled == expected


def test_only_the_windowed_dimensions_are_gathered():
    """A halo beyond the neighbours on one dimension gathers every dimension the pad
    windows (here both sharded ones), not those it leaves alone."""
    grid = mesh((2, 4), ("data", "model"))
    spec = P(None, "data", "model")
    x = np.arange(8 * 64 * 64, dtype=np.float32).reshape(8, 64, 64)
    predicted, compiled = predicted_and_compiled(
        lambda a: jnp.pad(a, ((0, 0), (2, 2), (128, 0))), (x,), (spec,), spec, grid)
    assert predicted == compiled == {"all-gather": 196608}
    predicted, compiled = predicted_and_compiled(
        lambda a: jnp.pad(a, ((0, 0), (0, 0), (128, 0))), (x,), (P("data", None, "model"),),
        P("data", None, "model"), grid)
    assert predicted == compiled == {"all-gather": 65536}


def test_pad_reads_a_replicated_operand_locally_and_a_resharded_one_by_halos():
    """A replicated operand is padded and sliced on each device (no collective); one
    sharded along another dimension is first moved by an all-to-all, then exchanged."""
    grid = mesh(*GRID_2x4)
    out = NamedSharding(grid, P(None, "model"))

    def fun(x):
        return jax.lax.with_sharding_constraint(jnp.pad(x, ((0, 0), (1, 7))), out) * 2

    predicted, compiled = predicted_and_compiled(fun, (matrix(16, 32),), (P(),), grid=grid)
    assert predicted == compiled == {}
    predicted, compiled = predicted_and_compiled(fun, (matrix(16, 32),), (P("model"),),
                                                 grid=grid)
    assert predicted == compiled == {"all-to-all": 512, "collective-permute": 320}


@pytest.mark.parametrize("grid, shift, axis, cp", [
    (GRID_2x4, 3, 1, 96),     # a piece from the left neighbour
    (GRID_2x4, 21, 1, 512),   # pieces from two and one shards away
    (GRID_2x4, -5, 0, 320),   # a piece moved a whole turn stays on its device
    (GRID_8, 21, 1, 512),
])
def test_roll_is_a_rotation(grid, shift, axis, cp):
    """``jnp.roll`` concatenates ``x[n-k:]`` and ``x[:n-k]``; XLA rewrites it into a
    rotation: each shard's pieces come from the shards ``ceil((k - done) / shard)``
    away, one collective-permute each."""
    grid = mesh(*grid)
    spec = P("data", "model") if len(grid.shape) == 2 else P(None, "model")
    predicted, compiled = predicted_and_compiled(
        lambda x: jnp.roll(x, shift, axis=axis), (matrix(16, 64),), (spec,), spec, grid)
    assert predicted == compiled == {"collective-permute": cp}


def test_uneven_rotation_and_reverse():
    """A rotation of a dimension the mesh does not divide rotates twice (the last
    shard's padding); a reverse sends every shard to its mirror device."""
    grid = mesh(*GRID_2x4)
    cols = NamedSharding(grid, P(None, "model"))

    def fun(x):
        y = jax.lax.with_sharding_constraint(x[:, :42] * 2, cols)
        return jnp.roll(y, 5, axis=1).sum(0), jnp.flip(x, axis=1) * 2

    predicted, compiled = predicted_and_compiled(fun, (matrix(16, 48),), (P(None, "model"),),
                                                 grid=grid)
    assert predicted == compiled
    # the slice's left halo of 3 columns, the rotation's pieces of 5 and 7 (11-column
    # shards, 2 of padding), the reverse's whole 12-column shard
    assert compiled["collective-permute"] == 16 * 3 * 4 + 16 * (5 + 7) * 4 + 16 * 12 * 4


@pytest.mark.parametrize("grid, strides, padding, kernel, cp", [
    (GRID_2x4, (1, 1), "SAME", 3, 2048),
    (GRID_2x4, (2, 2), "SAME", 3, 1024),
    (GRID_8, (1, 1), "VALID", 5, 8192),
])
def test_convolution_window_over_a_sharded_image(grid, strides, padding, kernel, cp):
    """A convolution whose input and output are split along a spatial dimension reads
    its window as a reduce_window would: halos of the rows the window reaches."""
    grid = mesh(*grid)
    image = P("data", "model") if len(grid.shape) == 2 else P(None, "model")
    x = np.ones((4, 32, 16, 8), np.float32)
    w = np.full((kernel, kernel, 8, 8), 0.1, np.float32)
    out = image if padding == "SAME" else None
    predicted, compiled = predicted_and_compiled(
        lambda x, w: jax.lax.conv_general_dilated(x, w, strides, padding,
                                                  dimension_numbers=NHWC),
        (x, w), (image, P()), out, grid)
    assert predicted == compiled
    assert compiled["collective-permute"] == cp


@pytest.mark.parametrize("strides, padding, kernel", [((1, 1), "SAME", 3), ((2, 2), "SAME", 3),
                                                      ((1, 1), "VALID", 5)])
def test_filter_gradient_over_a_sharded_image(strides, padding, kernel):
    """The filter gradient convolves the image with the output gradient, both split
    along rows: each device exchanges the image rows its gradient rows reach, and the
    partial sums are all-reduced over the batch axis, then over the rows' axis."""
    grid = mesh(*GRID_2x4)
    x = np.ones((4, 32, 16, 8), np.float32)
    w = np.full((kernel, kernel, 8, 8), 0.1, np.float32)

    def grad(x, w):
        return jax.grad(lambda w: jnp.sum(jax.lax.conv_general_dilated(
            x, w, strides, padding, dimension_numbers=NHWC) ** 2))(w)

    predicted, compiled = predicted_and_compiled(grad, (x, w), (P("data", "model"), P()),
                                                 grid=grid)
    assert predicted == compiled
    assert compiled["all-reduce"] == 2 * kernel * kernel * 8 * 8 * 4


def test_halo_sizes_follow_the_window():
    """``windowed_halos`` as ``ExchangeHalo`` sizes it: (permutes along the dimension,
    the windowed shard)."""
    assert windowed_halos(32, 4, WindowDim(padding_low=4, padding_high=4)) == ([2, 2], 10)
    assert windowed_halos(32, 4, WindowDim(size=3, padding_low=1, padding_high=1)) == (
        [1, 1], 10)
    assert windowed_halos(64, 4, WindowDim(padding_low=-5, padding_high=-27)) == ([16, 3], 8)
    # fewer windows than shards (x[2:6] over 8 shards of 8): XLA keeps the first four
    # shards, each cut to the six useful elements; shard 0 sends one to each of 1-3
    assert windowed_halos(64, 8, WindowDim(padding_low=-2, padding_high=-58)) == ([1, 1, 1], 1)
    # ... beside a dilation: not modelled
    assert windowed_halos(64, 8, WindowDim(padding_low=-2, padding_high=-58,
                                           window_dilation=2)) is None


@pytest.mark.parametrize("window, strides, padding, cp", [
    ((1, 2, 2, 1), (1, 2, 2, 1), "VALID", 0),      # the stride tiles the shards: no halo
    ((1, 3, 3, 1), (1, 2, 2, 1), "SAME", 1024),    # one row from the right neighbour
    ((1, 3, 3, 1), (1, 1, 1, 1), "SAME", 2048),    # a row from each side
])
def test_pooling_window_over_a_sharded_image(window, strides, padding, cp):
    """A reduce_window reads the rows its windows reach in its neighbours' shards: the
    window's stride and padding decide them, as for a convolution."""
    grid = mesh(*GRID_2x4)
    spec = P("data", "model")
    predicted, compiled = predicted_and_compiled(
        lambda x: jax.lax.reduce_window(x, -jnp.inf, jax.lax.max, window, strides, padding),
        (np.ones((4, 32, 16, 8), np.float32),), (spec,), spec, grid)
    assert predicted == compiled
    assert compiled.get("collective-permute", 0) == cp


@pytest.mark.parametrize("spec, fun, ar", [
    # kv[:, 0] of a dimension sharded on model: the slice keeps its one row sharded,
    # the squeeze replicates it (an all-reduce of the zero-padded shards).
    (P("data", "model"), lambda x: x.reshape(16, 4, 16)[:, 0] * 2, 16 * 16 * 4 // 2),
    # the sliced dimension on a sub-axis of model (k and v halves of a fused
    # projection): the squeeze all-reduces over that sub-axis only.
    (P("data", "model"), lambda x: x.reshape(16, 2, 2, 16)[:, 0] * 2, 16 * 2 * 16 * 4 // 2 // 2),
])
def test_squeezing_a_sliced_sharded_dimension_all_reduces_it(spec, fun, ar):
    grid = mesh(*GRID_2x4)
    predicted, compiled = predicted_and_compiled(fun, (matrix(16, 64),), (spec,), None, grid)
    assert predicted == compiled
    assert compiled.get("all-reduce", 0) == ar
    x = jax.device_put(matrix(16, 64), NamedSharding(grid, spec))
    ours, theirs = jit(fun)(x), jax.jit(fun)(x)
    np.testing.assert_array_equal(ours, theirs)
    assert ours.sharding.is_equivalent_to(theirs.sharding, ours.ndim)
