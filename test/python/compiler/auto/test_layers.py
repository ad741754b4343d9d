"""Repeated layers searched once: the search runs on the step with its long layer list cut."""

import jax
import numpy as np
import pytest
from jax.sharding import AxisType

from bench import auto_search as auto_bench
from shardc.compiler import AUTO, jit
from shardc.compiler.auto import layers
from shardc.compiler.auto.layers import KEPT, MIN_LAYERS, cut_layers, kept_index


@pytest.fixture(scope="module")
def mesh():
    return jax.make_mesh((2, 4), ("data", "model"), axis_types=(AxisType.Auto,) * 2)


def _sds(*shape):
    return jax.ShapeDtypeStruct(shape, np.float32)


def test_a_long_list_of_like_layers_is_cut_to_the_first_two_middle_ones_and_the_last():
    count = MIN_LAYERS + 3
    params = {"embed": _sds(8, 4),
              "layers": [{"w": _sds(4, 4), "b": _sds(4)} for _ in range(count)],
              "pair": [_sds(4), _sds(4)]}  # too short to cut
    cut = cut_layers(([params, _sds(2, 4)], {}))
    (got, batch), _ = cut.tree
    assert len(got["layers"]) == KEPT and len(got["pair"]) == 2 and batch.shape == (2, 4)
    full_leaves = jax.tree.leaves(([params, _sds(2, 4)], {}))
    cut_leaves = jax.tree.leaves(cut.tree)
    assert [cut_leaves[i].shape for i in cut.origin] == [x.shape for x in full_leaves]
    # leaves in order: embed, then per layer b, w; the cut's layer k's are at 1 + 2k
    paths = [jax.tree_util.keystr(p) for p, _ in
             jax.tree_util.tree_flatten_with_path(cut.tree)[0]]
    for layer in range(count):
        kept = kept_index(layer, count)
        assert paths[cut.origin[1 + 2 * layer]] == f"[0][0]['layers'][{kept}]['b']"
    assert [kept_index(i, count) for i in (0, 1, count // 2, count - 2, count - 1)] == [
        0, 1, 1, 2, KEPT - 1]


def test_short_unlike_or_positional_lists_are_not_cut():
    assert cut_layers(([[_sds(4)] * (MIN_LAYERS - 1)], {})) is None
    unlike = [_sds(4)] * (MIN_LAYERS - 1) + [_sds(5)]
    assert cut_layers(([unlike], {})) is None
    # the arguments themselves are the function's signature, never cut
    assert cut_layers(([_sds(4)] * MIN_LAYERS, {})) is None


def _choices(lowered):
    return [s.spec for s in jax.tree.leaves(lowered.in_shardings)]


def test_the_cut_search_is_no_slower_than_the_full_search_and_runs_as_jax_jit(mesh, monkeypatch):
    args = auto_bench.mlp_case(layers=MIN_LAYERS, d=32, hidden=128, batch=32).args
    abstract = jax.tree.map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype), args)
    step = auto_bench.mlp_step
    cut = jit(step, in_shardings=AUTO, out_shardings=AUTO, mesh=mesh).lower(*abstract)
    monkeypatch.setattr(layers, "MIN_LAYERS", 10 ** 9)
    full = jit(step, in_shardings=AUTO, out_shardings=AUTO, mesh=mesh).lower(*abstract)
    # The cut's state is priced on the full step (the same model as the full search's).
    assert cut.auto_report().step.seconds <= full.auto_report().step.seconds * (1 + 1e-9)
    assert cut.auto_report().step == cut.auto_report().choices[0].step
    placed = jax.device_put(args, tuple(cut.in_shardings[0]))
    got = cut.compile()(*placed)
    want = jax.jit(step, in_shardings=cut.in_shardings[0],
                   out_shardings=cut.out_shardings)(*placed)
    for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(want), strict=True):
        assert a.sharding.is_equivalent_to(b.sharding, a.ndim)
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-6)


def test_a_function_that_reads_past_the_cut_is_searched_whole(mesh):
    args = auto_bench.mlp_case(layers=MIN_LAYERS, d=16, hidden=32, batch=16).args

    def step(params, x, y):  # the last layer by its index: past a cut list's end
        w1, w2 = params[MIN_LAYERS - 1]
        return auto_bench.mlp_step(params, x @ w1 @ w2, y)

    lowered = jit(step, in_shardings=AUTO, out_shardings=AUTO, mesh=mesh).lower(*args)
    placed = jax.device_put(args, tuple(lowered.in_shardings[0]))
    got = lowered.compile()(*placed)
    want = jax.jit(step, in_shardings=lowered.in_shardings[0],
                   out_shardings=lowered.out_shardings)(*placed)
    for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(want), strict=True):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-6)
