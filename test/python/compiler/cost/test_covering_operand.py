"""A dot whose operand's contraction alone splits it over every device (a weight
gradient ``x^T dy`` with the batch and the sequence split): XLA's dot handler
reshards the other operand to that one's tiles and sums the partial products
(``PartitionBaseCase``), one all-reduce per sharded contracting dimension of it,
then slices a sharded result; the predicted bytes per collective kind against the
compiled HLO's."""

import jax
import numpy as np
import pytest
from jax import lax
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P

from shardc.compiler import jit


def _weight_gradient(x, dy):
    return lax.dot_general(x, dy, (((0, 1), (0, 1)), ((), ())))


SMALL_X = ((16, 64, 32), (16, 64, 48))  # x has fewer bytes than dy
LARGE_X = ((16, 64, 96), (16, 64, 8))
EQUAL = ((16, 64, 32), (16, 64, 32))
BOTH = ("data", "model")

CASES = {
    # Both contractions cover the devices: the smaller operand is resharded to the
    # larger's tiles (all-to-all), then one all-reduce per dimension the larger splits.
    "dy covers on one dimension: one all-reduce over both axes":
        ((2, 4), (P("data", "model"), P(BOTH)), P(), SMALL_X),
    "x covers on two dimensions: two all-reduces":
        ((2, 4), (P("data", "model"), P(BOTH)), P(), LARGE_X),
    "dy the larger, split on two dimensions":
        ((2, 4), (P(BOTH), P("data", "model")), P(), SMALL_X),
    "equal sizes: the left one is resharded":
        ((2, 4), (P("data", "model"), P(BOTH)), P(), EQUAL),
    "equal sizes, the other way":
        ((2, 4), (P(BOTH), P("data", "model")), P(), EQUAL),
    # Only one covers, the other splits the contraction alike or not at all: the other
    # is sliced to its tiles.
    "only the smaller covers":
        ((2, 4), (P("data", "model"), P("data")), P(), ((16, 64, 8), (16, 64, 96))),
    "three axes, one all-reduce over all":
        ((2, 2, 2), (P("a", ("b", "c")), P(("a", "b", "c"))), P(), SMALL_X),
    # A sharded result: the whole result all-reduced over the axes it is split on, the
    # slice over the others.
    "result split on the right side's dimension":
        ((2, 4), (P("data", "model"), P(BOTH)), P(None, "model"), SMALL_X),
    "result split on the left side's dimension":
        ((2, 4), (P("data", "model"), P(BOTH)), P("data"), LARGE_X),
    "result split on both sides' dimensions":
        ((2, 4), (P("data", "model"), P(BOTH)), P("data", "model"), LARGE_X),
    # Not this case: a result one side tiles over every device (that side's
    # partitioning comes first), and a contraction the other operand splits otherwise
    # (the last resort gathers both).
    "result tiled over every device on one side":
        ((2, 4), (P(BOTH), P("data", "model")), P(None, BOTH), SMALL_X),
    "the other operand splits the contraction otherwise":
        ((2, 4), (P(BOTH), P("data")), P(), SMALL_X),
    "three axes, the other operand splits a covered dimension partly":
        ((2, 2, 2), (P(("a", "b"), "c"), P("a")), P(), SMALL_X),
}


@pytest.mark.parametrize("name", CASES)
def test_weight_gradient_bytes_match_xla(name):
    shape, ins, out, shapes = CASES[name]
    names = BOTH if len(shape) == 2 else ("a", "b", "c")
    mesh = jax.make_mesh(shape, names, axis_types=(AxisType.Auto,) * len(shape))
    ins = tuple(NamedSharding(mesh, spec) for spec in ins)
    rand = np.random.default_rng(0)
    args = [jax.device_put(rand.standard_normal(s).astype(np.float32), i)
            for s, i in zip(shapes, ins)]
    lowered = jit(_weight_gradient, in_shardings=ins,
                  out_shardings=NamedSharding(mesh, out)).lower(*args)
    predicted = {k: t.bytes_per_device for k, t in lowered.comm_report().totals().items()}
    compiled = {k: c.bytes_per_device for k, c in lowered.compile().collectives().items()}
    assert predicted == compiled
    assert any(compiled.values())


def test_one_all_reduce_over_every_axis_where_the_covering_operand_splits_one_dimension():
    mesh = jax.make_mesh((2, 4), BOTH, axis_types=(AxisType.Auto,) * 2)
    ins = (NamedSharding(mesh, P("data", "model")), NamedSharding(mesh, P(BOTH)))
    args = [jax.ShapeDtypeStruct(s, np.float32, sharding=i) for s, i in zip(SMALL_X, ins)]
    report = jit(_weight_gradient, in_shardings=ins,
                 out_shardings=NamedSharding(mesh, P())).lower(*args).comm_report()
    reduces = [(e.axes, e.bytes_per_device) for e in report.entries if e.kind == "all-reduce"]
    assert reduces == [(BOTH, 32 * 48 * 4)]
