"""jax_debug_nans / jax_debug_infs: a call whose outputs hold a NaN (infinity) raises
``FloatingPointError`` as jax.jit's does, naming the operation that made it."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import PartitionSpec as P

from shardc.compiler import jit

JITS = [jax.jit, jit]


@pytest.mark.parametrize("make_jit", JITS, ids=["jax", "shardc"])
def test_nan_names_the_operation(make_jit):
    f = make_jit(lambda x, y: x / y)
    zero = jnp.zeros(())
    with jax.debug_nans(True):
        with pytest.raises(FloatingPointError, match=r"invalid value \(nan\) encountered in div"):
            f(zero, zero)


@pytest.mark.parametrize("make_jit", JITS, ids=["jax", "shardc"])
def test_fast_path_checks_too(make_jit):
    f = make_jit(lambda x: 0.0 / x)
    zero = jnp.array(0.0)
    f(zero)
    f(zero)  # now in the C++ dispatch's cache
    with jax.debug_nans(True):
        with pytest.raises(FloatingPointError, match="div"):
            f(zero)


@pytest.mark.parametrize("make_jit", JITS, ids=["jax", "shardc"])
def test_infs(make_jit):
    f = make_jit(lambda x: 1.0 / x)
    with jax.debug_infs(True):
        with pytest.raises(FloatingPointError, match=r"invalid value \(inf\)"):
            f(jnp.array(0.0))
        np.testing.assert_array_equal(f(jnp.array(2.0)), 0.5)


@pytest.mark.parametrize("make_jit", JITS, ids=["jax", "shardc"])
def test_nan_from_an_input_is_reported_as_such(make_jit):
    f = make_jit(lambda x: x * 3.0)
    with jax.debug_nans(True):
        with pytest.raises(FloatingPointError, match="de-optimized function did not .*input"):
            f(np.nan)


@pytest.mark.parametrize("make_jit", JITS, ids=["jax", "shardc"])
def test_donated_argument_kept_for_the_rerun(make_jit):
    mesh = jax.sharding.Mesh(np.array(jax.devices()[:2]), ("x",))
    f = make_jit(lambda x: 0.0 / x, in_shardings=P("x"), out_shardings=P("x"),
                 donate_argnums=0)
    x = jnp.array([0.0, 1.0])
    with jax.debug_nans(True), jax.set_mesh(mesh):
        with pytest.raises(FloatingPointError, match="div"):
            f(x)
    assert not x.is_deleted()


@pytest.mark.parametrize("make_jit", JITS, ids=["jax", "shardc"])
def test_under_grad(make_jit):
    f = make_jit(lambda x: jnp.divide(x, x))
    with jax.debug_nans(True):
        with pytest.raises(FloatingPointError):
            jax.grad(f)(0.0)
        assert jax.grad(f)(2.0) == 0.0
