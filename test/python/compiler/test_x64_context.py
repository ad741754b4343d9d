"""Under ``jax.enable_x64()`` contexts shardc's jit types arguments and results as
``jax.jit`` does: a 64-bit ``jax.Array`` made under x64 keeps its type when called
with x64 off, host data takes the canonical type of the x64 state at the call, and a
result made 64-bit inside the function comes back 64-bit."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from shardc.compiler import jit

WRAPS = pytest.mark.parametrize("wrap", [jax.jit, jit], ids=["jax.jit", "shardc"])


def test_64_bit_array_made_under_x64_called_without():
    with jax.enable_x64():
        x = jnp.int64(2**40 + 3)
    f = lambda v: (v.astype(jnp.int32), v, v + 1)  # noqa: E731
    (cast, same, plus), (jax_cast, jax_same, jax_plus) = jit(f)(x), jax.jit(f)(x)
    assert cast.dtype == jax_cast.dtype == jnp.int32
    assert same.dtype == jax_same.dtype == jnp.int64 and int(same) == 2**40 + 3
    assert plus.dtype == jax_plus.dtype and int(plus) == int(jax_plus)
    text = jit(lambda v: v.astype(jnp.int32)).lower(x).as_text()
    assert "%arg0: tensor<i64>" in text


@WRAPS
def test_result_made_64_bit_inside(wrap):
    @wrap
    def f(a):
        with jax.enable_x64():
            return 2 + a
    out = f(1)
    assert out.dtype == jnp.int64 and int(out) == 3


def test_host_data_typed_by_the_x64_state_of_each_call():
    f = jit(lambda v: v * 2)
    host = np.arange(4, dtype=np.int64)
    without = f(host)
    with jax.enable_x64():
        within = f(host)
    for x64, out in ((False, without), (True, within)):
        with jax.enable_x64(x64):
            expected = jax.jit(lambda v: v * 2)(host)
        assert out.dtype == expected.dtype
        np.testing.assert_array_equal(out, expected)
    assert without.dtype == jnp.int32 and within.dtype == jnp.int64
