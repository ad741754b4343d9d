"""Under ``jax_debug_key_reuse``, a call of shardc's jit checks PRNG key reuse as a
call of ``jax.jit`` does: a key consumed by an earlier call, passed in or closed
over, raises jax's ``KeyReuseError``; keys a call does not consume stay usable."""

import jax
import numpy as np
import pytest
from jax.errors import KeyReuseError

from shardc.compiler import jit

MESSAGE = "Previously-consumed key passed to jit-compiled function at index 0"


@pytest.fixture(autouse=True)
def debug_key_reuse():
    with jax.debug_key_reuse(True):
        yield


@pytest.mark.parametrize("wrap", [jax.jit, jit], ids=["jax.jit", "shardc"])
def test_key_passed_twice_raises(wrap):
    key = jax.random.key(0)
    first = wrap(jax.random.bits)(key)
    with pytest.raises(KeyReuseError, match=MESSAGE):
        wrap(jax.random.bits)(key)
    np.testing.assert_array_equal(first, jax.jit(jax.random.bits)(jax.random.key(0)))


@pytest.mark.parametrize("wrap", [jax.jit, jit], ids=["jax.jit", "shardc"])
def test_closed_over_key_reused_raises(wrap):
    key = jax.random.key(0)
    f = wrap(lambda: jax.random.uniform(key))
    f()
    with pytest.raises(KeyReuseError, match=MESSAGE):
        f()


@pytest.mark.parametrize("wrap", [jax.jit, jit], ids=["jax.jit", "shardc"])
def test_unconsumed_key_stays_usable(wrap):
    key = jax.random.key(1)
    assert float(wrap(lambda k, x: x + 1)(key, 1.0)) == 2.0  # key not consumed
    first = wrap(jax.random.bits)(key)
    np.testing.assert_array_equal(first, jax.random.bits(jax.random.key(1)))
    with pytest.raises(KeyReuseError, match=MESSAGE):
        wrap(jax.random.bits)(key)
