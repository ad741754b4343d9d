"""Token arguments and results (``jax.lax.create_token()``) go through shardc's jit
as through ``jax.jit``: lowered as ``!stablehlo.token``, passed and returned as jax's
token objects, next to sharded arrays."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P

from shardc.compiler import jit

TOKEN_TYPE = type(jax.lax.create_token())


@pytest.fixture(scope="module")
def mesh():
    return jax.make_mesh((4, 2), ("x", "y"), axis_types=(AxisType.Auto,) * 2)


def threaded(token, x):
    return token, x * 2


def both(wrap, fun, *args, **options):
    """``fun`` through jax.jit and shardc's jit, each output blocked on."""
    outs = []
    for jitted in (jax.jit(fun, **options), wrap(fun, **options)):
        out = jitted(*args)
        jax.block_until_ready(jax.tree.leaves(out, is_leaf=lambda v: isinstance(v, TOKEN_TYPE)))
        outs.append(out)
    return outs


def test_token_argument_and_result_round_trip(mesh):
    x = jax.device_put(np.arange(32, dtype=np.float32).reshape(8, 4),
                       NamedSharding(mesh, P("x", "y")))
    (jax_token, jax_y), (token, y) = both(jit, threaded, jax.lax.create_token(), x)
    assert isinstance(token, TOKEN_TYPE) and isinstance(jax_token, TOKEN_TYPE)
    np.testing.assert_array_equal(y, jax_y)
    assert y.sharding == jax_y.sharding
    # The token that came back goes in again.
    token, y = jit(threaded)(token, y)
    token.block_until_ready()
    np.testing.assert_array_equal(y, jax_y * 2)


def test_token_lowered_as_stablehlo_token():
    args = (jax.lax.create_token(), jnp.ones(3))
    text = jit(threaded).lower(*args).as_text()
    assert "%arg0: !stablehlo.token" in text
    assert "-> (!stablehlo.token" in text
    assert jax.jit(threaded).lower(*args).as_text() == text


def test_token_made_inside_returned():
    jax_token, token = both(jit, lambda x: jax.lax.create_token(x), 1.0)
    assert isinstance(token, TOKEN_TYPE) and isinstance(jax_token, TOKEN_TYPE)


def test_token_with_given_shardings(mesh):
    shardings = dict(in_shardings=(None, NamedSharding(mesh, P("x"))),
                     out_shardings=(None, NamedSharding(mesh, P("y"))))
    x = np.ones((8, 4), np.float32)
    (_, jax_y), (token, y) = both(jit, threaded, jax.lax.create_token(), x, **shardings)
    assert isinstance(token, TOKEN_TYPE)
    np.testing.assert_array_equal(y, jax_y)
    assert y.sharding == jax_y.sharding


def test_token_of_an_enclosing_trace(mesh):
    x = jax.device_put(jnp.ones((8, 4)), NamedSharding(mesh, P("x", "y")))
    outer = jax.jit(lambda t, x: jit(threaded)(t, x))(jax.lax.create_token(), x)
    assert isinstance(outer[0], TOKEN_TYPE)
    np.testing.assert_array_equal(outer[1], x * 2)
    grad = jax.grad(lambda x: jit(threaded)(jax.lax.create_token(), x)[1].sum())(x)
    np.testing.assert_array_equal(grad, jnp.full((8, 4), 2.0))


def test_token_is_not_an_empty_boolean_array():
    # A token and a bool[0] array are other programs (and other cache entries).
    f = jit(lambda v: v)
    token = f(jax.lax.create_token())
    array = f(np.zeros(0, np.bool_))
    assert isinstance(token, TOKEN_TYPE)
    assert isinstance(array, jax.Array) and array.shape == (0,)
