"""Programs with jax's high-level types (hijax): arguments, results and closed-over
boxes of a registered ``HiType`` run as with jax.jit (the types lowered to arrays at
each call by jit's rule)."""

from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax._src import state
from jax._src.hijax import Box
from jax.experimental.hijax import HiType, VJPHiPrimitive, register_hitype

from shardc.compiler import jit

JITS = [jax.jit, jit]


@dataclass(frozen=True)
class Pair:
    first: jax.Array
    second: jax.Array


@dataclass(frozen=True)
class PairTy(HiType):
    first: jax.core.ShapedArray
    second: jax.core.ShapedArray

    def lo_ty(self):
        return [self.first, self.second]

    def lower_val(self, hi_val):
        return [hi_val.first, hi_val.second]

    def raise_val(self, first, second):
        return Pair(first, second)


register_hitype(Pair, lambda p: PairTy(jax.typeof(p.first), jax.typeof(p.second)))


def _pair():
    return Pair(jnp.arange(4.0), jnp.ones((2, 3), jnp.int32))


@pytest.mark.parametrize("make_jit", JITS, ids=["jax", "shardc"])
def test_high_level_argument_and_result(make_jit):
    # Inside the trace a high-level value is opaque: passed through as it is.
    f = make_jit(lambda p, x: (p, x * 2))
    out, doubled = f(_pair(), 2.0)
    assert isinstance(out, Pair)
    np.testing.assert_array_equal(out.first, jnp.arange(4.0))
    np.testing.assert_array_equal(out.second, jnp.ones((2, 3), jnp.int32))
    assert doubled == 4.0


@pytest.mark.parametrize("make_jit", JITS, ids=["jax", "shardc"])
def test_closed_over_high_level_result(make_jit):
    pair = _pair()
    f = make_jit(lambda: pair)
    assert isinstance(f(), Pair)
    np.testing.assert_array_equal(f().first, pair.first)
    assert jax.eval_shape(f) == PairTy(jax.core.ShapedArray((4,), jnp.float32),
                                       jax.core.ShapedArray((2, 3), jnp.int32))


@pytest.mark.parametrize("make_jit", JITS, ids=["jax", "shardc"])
def test_box_argument_updated(make_jit):
    @make_jit
    def add(box, x):
        box.set(box.get() + x)

    box = Box(1.0)
    add(box, 1.0)
    add(box, 2.0)
    np.testing.assert_allclose(box.get(), 4.0)


@pytest.mark.parametrize("make_jit", JITS, ids=["jax", "shardc"])
def test_closed_over_box(make_jit):
    box = Box(jnp.zeros(2))

    @make_jit
    def bump(x):
        box.set(box.get() + x)
        return x * 2

    np.testing.assert_array_equal(bump(jnp.ones(2)), jnp.full(2, 2.0))
    bump(jnp.ones(2))
    np.testing.assert_array_equal(box.get(), jnp.full(2, 2.0))


class _SquareInPlace(VJPHiPrimitive):
    """A high-level primitive writing its ``Ref`` argument."""

    def __init__(self, ref_aval):
        self.in_avals = (ref_aval,)
        self.out_aval = None
        self.params = {}
        self.effects = {state.WriteEffect(0)}
        super().__init__()

    def expand(self, ref):
        ref[...] = ref[...] ** 2


@pytest.mark.parametrize("make_jit", JITS, ids=["jax", "shardc"])
def test_high_level_primitive_writing_a_ref(make_jit):
    ref = jax.new_ref(jnp.float32(3.0))
    make_jit(lambda r: _SquareInPlace(jax.typeof(r))(r))(ref)
    assert ref[...] == 9.0


@pytest.mark.parametrize("make_jit", JITS, ids=["jax", "shardc"])
def test_high_level_primitive_writing_a_ref_made_inside(make_jit):
    # The equation writes a Ref the program made itself and reads after it; it
    # declares no result: only its low-level form shows that it is not dead code.
    def square(x):
        ref = jax.new_ref(x)
        _SquareInPlace(jax.typeof(ref))(ref)
        return ref[...]

    np.testing.assert_array_equal(make_jit(square)(jnp.arange(4.0)), jnp.arange(4.0) ** 2)


@pytest.fixture
def scan3():
    """jax's scan that carries through Refs (``jax_scan3``): one high-level equation
    writing them, with no result of its own when the scan has no outputs."""
    previous = jax.config.jax_scan3
    jax.config.update("jax_scan3", True)
    yield
    jax.config.update("jax_scan3", previous)


@pytest.mark.parametrize("make_jit", JITS, ids=["jax", "shardc"])
def test_scan_through_refs(make_jit, scan3):
    x = jnp.arange(4.0)
    loop = make_jit(lambda x: jax.lax.fori_loop(0, 3, lambda i, c: c + i * x, x))
    np.testing.assert_array_equal(loop(x), x * 4)
    carry = make_jit(lambda x: jax.lax.scan(lambda c, _: (c + 1.0, None), x, None, length=3)[0])
    np.testing.assert_array_equal(carry(x), x + 3)
