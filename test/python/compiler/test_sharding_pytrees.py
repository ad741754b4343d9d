"""Sharding pytrees read exactly as jax.jit reads them: ``None`` holes in the arguments
(``eqx.partition``, optax states built from it), ``None`` leaves in the shardings,
prefixes, lists, ``UNSPECIFIED``, ``out_shardings`` trees and keyword arguments.

Every case runs through jax.jit too: same values, equivalent output shardings, and
for a refused tree jax's error class and wording.
"""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P

from shardc.compiler import jit
from shardc.dialects.errors import ShardingTreeError


@pytest.fixture(scope="module")
def mesh():
    return jax.make_mesh((2,), ("model",), axis_types=(AxisType.Auto,))


def both(make_call):
    """``make_call(jit)`` with jax.jit and with shardc's jit; the two results."""
    return make_call(jax.jit), make_call(jit)


def assert_same(theirs, ours):
    assert jax.tree.structure(theirs) == jax.tree.structure(ours)
    for t, o in zip(jax.tree.leaves(theirs), jax.tree.leaves(ours)):
        np.testing.assert_array_equal(np.asarray(o), np.asarray(t))
        assert o.sharding.is_equivalent_to(t.sharding, t.ndim), (o.sharding, t.sharding)


def assert_values(theirs, ours):
    assert jax.tree.structure(theirs) == jax.tree.structure(ours)
    for t, o in zip(jax.tree.leaves(theirs), jax.tree.leaves(ours)):
        np.testing.assert_array_equal(np.asarray(o), np.asarray(t))


def double(tree):
    return jax.tree.map(lambda x: x * 2, tree)


def partitioned(mesh):
    params = {"a": None, "b": jnp.arange(32.0).reshape(8, 4), "c": jnp.arange(4.0)}
    shardings = {"a": None, "b": NamedSharding(mesh, P("model")), "c": NamedSharding(mesh, P())}
    return params, shardings


def test_none_holes_in_the_arguments_take_no_sharding_host_data(mesh):
    params, shardings = partitioned(mesh)
    theirs, ours = both(lambda j: j(double, in_shardings=(shardings,))(params))
    assert_same(theirs, ours)
    assert ours["a"] is None
    assert ours["b"].sharding.spec == P("model")


def test_none_holes_in_the_arguments_take_no_sharding_placed(mesh):
    params, shardings = partitioned(mesh)
    placed = jax.device_put(params, shardings)
    theirs, ours = both(lambda j: j(double, in_shardings=(shardings,))(placed))
    assert_same(theirs, ours)


def test_a_sharding_over_a_none_hole_covers_nothing(mesh):
    s = NamedSharding(mesh, P("model"))
    x = jnp.arange(8.0)
    assert_same(*both(lambda j: j(lambda a, b: b * 2, in_shardings=(s, s))(None, x)))
    assert_same(*both(lambda j: j(lambda a, b: b * 2, in_shardings=(None, s))(None, x)))
    assert_same(*both(lambda j: j(lambda p: p["b"], in_shardings=({"a": s, "b": s},))(
        {"a": None, "b": x})))


def test_equinox_partition_and_optax_state(mesh):
    model = eqx.nn.MLP(4, 2, 8, 1, key=jax.random.key(0))
    params, _ = eqx.partition(model, eqx.is_array)
    opt_state = optax.adam(1e-3).init(params)
    replicated = NamedSharding(mesh, P())
    split = NamedSharding(mesh, P("model"))

    def sharding_of(x):
        return split if x.ndim == 2 and x.shape[0] % 2 == 0 else replicated
    shardings = jax.tree.map(sharding_of, (params, opt_state))

    def step(params, opt_state):
        return jax.tree.map(lambda x: x + 1, params), opt_state

    theirs, ours = both(lambda j: j(step, in_shardings=shardings)(params, opt_state))
    assert_same(theirs, ours)
    for t, o in zip(jax.tree.leaves(theirs), jax.tree.leaves(ours)):
        assert o.sharding.spec == t.sharding.spec


def test_prefixes_lists_and_unspecified(mesh):
    s = NamedSharding(mesh, P("model"))
    x = jnp.arange(32.0).reshape(8, 4)
    tree = {"a": x, "b": [x, x]}
    assert_same(*both(lambda j: j(double, in_shardings=s)(tree)))
    assert_same(*both(lambda j: j(lambda p, q: (p, q), in_shardings=({"a": s, "b": None}, None))(
        tree, x)))
    assert_same(*both(lambda j: j(lambda p, q: p * q, in_shardings=[s, None])(x, x)))
    # jax's own marker, which jax.jit takes as a leaf (jax.jit's default value).
    from jax._src.sharding_impls import UNSPECIFIED as unspecified
    assert_same(*both(lambda j: j(lambda p, q: (p, q), in_shardings=(unspecified, s))(x, x)))


def test_out_shardings_trees_with_none_holes(mesh):
    s, r = NamedSharding(mesh, P("model")), NamedSharding(mesh, P())
    x = jnp.arange(32.0).reshape(8, 4)
    theirs, ours = both(lambda j: j(lambda p: {"a": None, "b": p, "c": p[0]},
                                    out_shardings={"a": None, "b": s, "c": r})(x))
    assert_same(theirs, ours)
    assert ours["b"].sharding.spec == P("model") and ours["c"].sharding.spec == P()
    assert_same(*both(lambda j: j(lambda p: [p, p], out_shardings=[s, None])(x)))


def test_lower_and_trace_read_the_same_trees(mesh):
    params, shardings = partitioned(mesh)
    lowered = jit(double, in_shardings=(shardings,)).lower(params)
    theirs = jax.jit(double, in_shardings=(shardings,)).lower(params)
    ours_in = jax.tree.leaves(lowered.compile().input_shardings)
    theirs_in = jax.tree.leaves(theirs.compile().input_shardings)
    assert [s.spec for s in ours_in] == [s.spec for s in theirs_in]
    traced = jit(lambda p: {"a": None, "b": p}, out_shardings={"a": None, "b": shardings["b"]}
                 ).trace(params["b"])
    assert traced.out_info["b"].sharding == shardings["b"]


def test_bound_under_an_enclosing_trace(mesh):
    # The equation staged out carries one sharding per array, the holes taking none.
    params, shardings = partitioned(mesh)
    theirs = jax.make_jaxpr(lambda p: jax.jit(double, in_shardings=(shardings,))(p))(params)
    ours = jax.make_jaxpr(lambda p: jit(double, in_shardings=(shardings,))(p))(params)
    (their_eqn,), (our_eqn,) = theirs.eqns, ours.eqns
    assert list(our_eqn.params["in_shardings"]) == list(their_eqn.params["in_shardings"])
    values = jax.jit(lambda p: jit(double, in_shardings=(shardings,))(p))(params)
    assert_values(jax.jit(double)(params), values)


@pytest.mark.parametrize("shardings, args, words", [
    (lambda s: ({"a": s, "c": None},), lambda x: ({"a": x, "b": [x, x]},),
     "pytree structure error: different pytree metadata"),
    (lambda s: (s,), lambda x: (x, x),
     "pjit in_shardings specification must be a tree prefix of the positional arguments tuple"),
])
def test_trees_that_are_no_prefix_are_jax_errors(mesh, shardings, args, words):
    s, x = NamedSharding(mesh, P("model")), jnp.arange(8.0)
    with pytest.raises(ValueError, match=words):
        jax.jit(lambda *a: a[0], in_shardings=shardings(s))(*args(x))
    with pytest.raises(ShardingTreeError, match=words):
        jit(lambda *a: a[0], in_shardings=shardings(s))(*args(x))


@pytest.mark.parametrize("out_shardings, result, words", [
    (lambda s: {"a": s}, lambda p: {"a": p, "b": p}, "different numbers of pytree children"),
    (lambda s: (s, None), lambda p: [p, p], "different types"),
])
def test_out_trees_that_are_no_prefix_are_jax_errors(mesh, out_shardings, result, words):
    s, x = NamedSharding(mesh, P("model")), jnp.arange(8.0)
    with pytest.raises(ValueError, match=words):
        jax.jit(result, out_shardings=out_shardings(s))(x)
    with pytest.raises(ShardingTreeError, match=words):
        jit(result, out_shardings=out_shardings(s))(x)


@pytest.mark.parametrize("in_shardings", ["sharding", (None,)])
def test_keyword_arguments_with_in_shardings_are_jax_error(mesh, in_shardings):
    s, x = NamedSharding(mesh, P("model")), jnp.arange(8.0)
    in_shardings = (s,) if in_shardings == "sharding" else in_shardings
    words = "pjit does not support kwargs when in_shardings is specified"
    for j in (jax.jit, jit):
        with pytest.raises(ValueError, match=words):
            j(lambda x, y: x * y, in_shardings=in_shardings)(x, y=x)
        with pytest.raises(ValueError, match=words):
            j(lambda x, n: x * n, in_shardings=in_shardings, static_argnames="n")(x, n=3)
    # Without in_shardings keyword arguments follow their data, as with jax.jit.
    assert_same(*both(lambda j: j(lambda x, y: x * y)(x, y=jax.device_put(x, s))))


def test_keyword_arguments_with_a_single_device_sharding_are_jax_error():
    sharding = jax.sharding.SingleDeviceSharding(jax.devices()[0])
    words = "pjit does not support kwargs when in_shardings is specified"
    for j in (jax.jit, jit):
        with pytest.raises(ValueError, match=words):
            j(lambda x: x, in_shardings=sharding)(x=jnp.arange(8.0))
