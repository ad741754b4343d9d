"""Reshards on meshes of 3 axes and with partially replicated shardings, each held to
what XLA compiles: ``Lowered.comm_report()``'s bytes per device per collective kind
equal ``Compiled.collectives()``'s on 8 CPU devices. Each case takes one of
``PartitionedHlo::ReshardNoCache``'s routes past the plain all-to-all and
replicate-and-slice ones (reshard._Planner)."""

import jax.numpy as jnp
import numpy as np
import pytest
from comm_comparison import mesh, predicted_and_compiled
from jax.sharding import PartitionSpec as P

CUBE = ((2, 2, 2), ("x", "y", "z"))


def reshard(shape, src, dst, grid):
    return predicted_and_compiled(lambda a: a * 2, (np.ones(shape, jnp.float32),),
                                  (src,), dst, mesh(*grid))


@pytest.mark.parametrize("src, dst, kinds", [
    # replicated over z, then z's replicas made a dimension (a free slice), then the
    # split of the merged dimension moved by one all-to-all and a permute
    (P(("y", "x")), P(None, None, ("z", "x", "y")), {"all-to-all", "collective-permute"}),
    (P("z"), P(None, ("z", "y"), "x"), {"all-to-all", "collective-permute"}),
    (P("x", None, "z"), P(("x", "z"), "y"), {"all-to-all"}),
    # a dimension on all 8 devices split to 2: gathered inside groups of 4, the groups
    # (by z) not the target's (by y): a permute follows
    (P(("z", "x", "y")), P("y", "x", "z"), {"all-gather", "collective-permute"}),
    # the merge [1, 1, 8] -> [2, 2, 2]: a gather inside the groups of the split
    (P(None, None, ("z", "x", "y")), P("y", "x", "z"), {"all-gather"}),
    # an axis leaves for the replicas while another moves: gathered after a slice
    (P(None, "y", "x"), P(("x", "z")), {"all-gather", "all-to-all", "collective-permute"}),
])
def test_reshard_on_three_axes(src, dst, kinds):
    """``ReshardFromPartialReplicateWithDynamicSlice``, ``TryComplexReshardHandling``
    (merge/split on the split tensor, replicas turned into a dimension) and grouping
    on equally split dimensions, as XLA's SPMD partitioner takes them."""
    predicted, compiled = reshard((8, 8, 16), src, dst, CUBE)
    assert predicted == compiled
    assert set(compiled) == kinds


@pytest.mark.parametrize("grid, src, dst", [
    (((4, 2), ("x", "y")), P("x", "y"), P(None, "x")),
    (((4, 2), ("x", "y")), P("y"), P(None, ("y", "x"))),
    (((2, 4), ("x", "y")), P("x", "y"), P("y")),
    (((2, 4), ("x", "y")), P(None, ("y", "x")), P("x", "y")),
    (((2, 2, 2), ("x", "y", "z")), P("x", ("z", "y")), P(None, "y", "x")),
    (((2, 2, 2), ("x", "y", "z")), P("y", None, ("z", "x")), P("z", "x")),
])
def test_axis_moving_while_the_tile_count_changes(grid, src, dst):
    """An axis changes dimension while the number of tiles changes: XLA mixes
    all-to-alls, slices of the replicas and gathers (no full rematerialization)."""
    predicted, compiled = reshard((8, 8, 16), src, dst, grid)
    assert predicted == compiled


@pytest.mark.parametrize("src, dst, expected", [
    (P(None, "y"), P("y", "x"), {"all-to-all": 128}),
    (P("y", "x"), P(None, "y"), {"all-to-all": 128, "all-gather": 128}),
])
def test_partially_replicated_and_tiled_on_the_same_devices(src, dst, expected):
    """``ReshardPartialReplicateWithAllToAll``: ``[1, X] last_tile_dim_replicate`` and
    ``[X, R]`` on the same device order are one all-to-all apart (2x4 mesh)."""
    predicted, compiled = reshard((8, 16), src, dst, ((2, 4), ("x", "y")))
    assert predicted == compiled == expected


def _rotate_pairs(x):
    """RoPE's rotation of interleaved pairs: strided slices, then stacked back."""
    x1, x2 = x[..., ::2], x[..., 1::2]
    return jnp.stack([x1 * 2 - x2, x1 + x2 * 3], -1).reshape(x.shape)


@pytest.mark.parametrize("grid, features", [
    (((8,), ("y",)), 8),
    (((2, 4), ("x", "y")), 4),
])
def test_padding_that_does_not_line_up_is_moved_before_the_gather(grid, features):
    """A head dimension split one element per device: each strided half holds its
    elements on the first half of the shards, padding on the rest, and the stacked
    pairs go to half as many shards (``[y] -> [y:(1)k]``). XLA first moves each
    shard's element left past the padding of the groups before it
    (``TileToPartialReplicateHaloExchange``: two collective-permutes on 8 shards),
    which the prediction left out (256 of 768 bytes of permutes on 8)."""
    predicted, compiled = predicted_and_compiled(
        _rotate_pairs, (np.ones((4, 8, features), jnp.float32),), (P(None, None, "y"),),
        grid=mesh(*grid))
    assert predicted == compiled
    assert "collective-permute" in compiled
