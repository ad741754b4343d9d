"""Lowering programs with effects: ``@main`` keeps jax's tokens and ``Ref`` values.

The module shardc annotates is jax's: ordered effects' tokens lead the
arguments and results, the closed-over ``Ref``s follow the arguments and each
``Ref``'s new value is a result aliased to that ``Ref``'s buffer.
"""

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P

from shardc.compiler import jit


@pytest.fixture(scope="module")
def mesh():
    return jax.make_mesh((4, 2), ("x", "y"), axis_types=(AxisType.Auto,) * 2)


def main_signature(text):
    return re.search(r"func\.func public @main\((.*)\) -> \((.*)\) \{", text).groups()


def types(signature):
    return re.findall(r"(!stablehlo\.token|tensor<[^>]*>)", signature)


def test_tokens_lead_main_as_in_jax():
    def f(x):
        jax.debug.print("{x}", x=x, ordered=True)
        jax.experimental.io_callback(lambda v: None, None, x, ordered=True)
        return x + 1

    x = jnp.ones(3)
    ours = [types(part) for part in main_signature(jit(f).lower(x).as_text())]
    theirs = [types(part) for part in main_signature(jax.jit(f).lower(x).as_text())]
    assert ours == theirs
    assert ours[0][:2] == ours[1][:2] == ["!stablehlo.token"] * 2


def test_ref_value_aliases_its_own_result(mesh):
    # The function's own result (first) has the Ref's shape and sharding too: the
    # Ref's buffer must still go to the Ref's new value, as jax pairs them.
    def f(ref, x):
        ref[...] += x
        return x * 2

    sharding = NamedSharding(mesh, P("x", "y"))
    ref = jax.new_ref(jax.device_put(jnp.zeros((8, 4)), sharding))
    x = jax.device_put(jnp.ones((8, 4)), sharding)
    arguments, _ = main_signature(jit(f).lower(ref, x).as_text())
    assert "tf.aliasing_output = 1" in arguments.split("%arg1")[0]
    out = jit(f)(ref, x)
    np.testing.assert_array_equal(out, 2 * np.ones((8, 4)))
    np.testing.assert_array_equal(ref[...], np.ones((8, 4)))
    assert ref.sharding.is_equivalent_to(sharding, 2)


def test_lowered_for_an_abstract_ref_runs_on_a_ref(mesh):
    sharding = NamedSharding(mesh, P("x"))

    def f(ref):
        ref[...] += 1.0
        ref[0] += 5.0

    abstract = jax.ShapeDtypeStruct((8,), jnp.float32, sharding=sharding, is_ref=True)
    compiled = jit(f).lower(abstract).compile()
    ref = jax.new_ref(jax.device_put(jnp.arange(8.0), sharding))
    compiled(ref)
    expected = np.arange(8.0) + 1
    expected[0] += 5
    np.testing.assert_array_equal(ref[...], expected)


def test_a_ref_and_an_array_lower_apart():
    def f(v):
        return v[...] * 2

    fun = jit(f)
    np.testing.assert_array_equal(fun(jnp.ones(2)), fun(jax.new_ref(jnp.ones(2))))
    assert fun.cache_info().misses == 2


def test_a_ref_laid_out_otherwise_compiles_again(mesh):
    def f(ref):
        ref[...] += 1.0

    fun = jit(f)
    refs = [jax.new_ref(jax.device_put(jnp.zeros((8, 4)), NamedSharding(mesh, spec)))
            for spec in (P("x"), P(None, "y"))]
    for ref in refs:
        fun(ref)
        np.testing.assert_array_equal(ref[...], np.ones((8, 4)))
    assert [ref.sharding.spec for ref in refs] == [P("x"), P(None, "y")]


@pytest.mark.parametrize("transform", [lambda f: f, jax.grad], ids=["call", "grad"])
def test_view_of_a_ref_passed_to_an_inner_jit(transform):
    """An inner jit called with a view of a ``Ref`` (``ref.at[2:7]``, jax's
    ``TransformedRef``) takes, as jax's tracing flattens it, the ``Ref`` and writes
    through the view; shardc flattened it as one leaf, which has no type
    ("TransformedRefs cannot be abstractified")."""

    def outer(j, x):
        ref = jax.new_ref(jnp.zeros(10) + x)
        view = ref.at[2:7]

        def body(v):
            v[...] += jnp.arange(5.0)

        j(body)(view)
        return ref[...].sum() * x

    x = jnp.float32(1.5)
    got = jit(transform(lambda x: outer(jit, x)))(x)
    want = jax.jit(transform(lambda x: outer(jax.jit, x)))(x)
    np.testing.assert_allclose(got, want, rtol=1e-6)
