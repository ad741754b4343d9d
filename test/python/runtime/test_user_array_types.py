"""Array types of the user's that jax's dispatch knows (registered with jax as jax's own
tests register them: ``core.pytype_aval_mappings`` for the type, ``pxla.shard_arg_handlers``
for placing it): passed to a jitted function as to jax.jit, and each shape its own program."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax._src import core, dtypes  # registration is jax's private API, as in jax's tests
from jax._src.interpreters import pxla

from shardc.compiler import jit


class Wrapped:
    """An array of the user's: a jax.Array inside an object of its own."""

    def __init__(self, data):
        self.data = data


def _place(xs, shardings, layouts, copy_semantics):
    return pxla.shard_args(shardings, layouts, copy_semantics, [x.data for x in xs])


@pytest.fixture
def registered():
    core.pytype_aval_mappings[Wrapped] = lambda x: core.ShapedArray(x.data.shape, x.data.dtype)
    pxla.shard_arg_handlers[Wrapped] = _place
    dtypes.register_canonicalize_value_handler(Wrapped, None)
    yield
    del core.pytype_aval_mappings[Wrapped]
    del pxla.shard_arg_handlers[Wrapped]


def test_user_array_type_passed_as_to_jax_jit(registered):
    double = lambda x: x * 2 + 1  # noqa: E731
    ours, theirs = jit(double), jax.jit(double)
    for shape in ((3,), (2, 4), (3,)):
        value = Wrapped(jnp.arange(np.prod(shape), dtype=jnp.float32).reshape(shape))
        got, expected = ours(value), theirs(value)
        assert got.shape == expected.shape == shape
        np.testing.assert_array_equal(got, expected)
