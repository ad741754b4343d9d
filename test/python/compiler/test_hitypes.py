"""Arguments jax.jit takes that shardc's jit must take alike: pytrees whose nodes check
their leaves when built, and programs with jax's high-level ("hijax") types
with the shardings given to ``jit`` (each spread over a high-level value's arrays)
and lowered ahead of time (``lower()``, ``trace()``, ``compile()``), compared
with ``jax.jit``. (test_hijax.py: calls of hijax programs without shardings.)
"""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax._src.hijax import Box  # as jax's own hijax tests use it
from jax.experimental import random as exp_random
from jax.experimental.hijax import HiType, ShapedArray, register_hitype
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P

from shardc.compiler import jit


# A quantized matrix: int8 values with one float scale per row. Its type lowers to
# the two arrays; jax treats it as one value (not a pytree).
@dataclasses.dataclass(frozen=True)
class Quantized:
    values: jax.Array  # int8[rows, cols]
    scale: jax.Array  # float32[rows]


@dataclasses.dataclass(frozen=True)
class QuantizedTy(HiType):
    shape: tuple[int, int]

    def lo_ty(self):
        rows, cols = self.shape
        return [ShapedArray((rows, cols), jnp.dtype("int8")),
                ShapedArray((rows,), jnp.dtype("float32"))]

    def lower_val(self, value):
        return [value.values, value.scale]

    def raise_val(self, values, scale):
        return Quantized(values, scale)


register_hitype(Quantized, lambda q: QuantizedTy(q.values.shape))


@pytest.fixture(scope="module")
def mesh():
    return jax.make_mesh((4, 2), ("x", "y"), axis_types=(AxisType.Auto,) * 2)


def quantized(rows=8, cols=4):
    values = np.arange(rows * cols, dtype=np.int8).reshape(rows, cols)
    return Quantized(jnp.asarray(values), jnp.linspace(0.5, 2.0, rows, dtype=jnp.float32))


def passing(q, factor):
    # Inside the trace a high-level value is one traced value: it goes through as is
    # (its operations would be high-level primitives).
    return {"q": q, "scaled": factor * 2.0}


def assert_same_quantized(ours, theirs):
    assert isinstance(ours, Quantized)
    for a, b in ((ours.values, theirs.values), (ours.scale, theirs.scale)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
        assert a.dtype == b.dtype
        assert a.sharding.is_equivalent_to(b.sharding, a.ndim), (a.sharding, b.sharding)


def assert_same_results(ours, theirs):
    assert_same_quantized(ours["q"], theirs["q"])
    np.testing.assert_array_equal(ours["scaled"], theirs["scaled"])


def test_high_level_argument_and_result_match_jax():
    q = quantized()
    assert_same_results(jit(passing)(q, 3.0), jax.jit(passing)(q, 3.0))


def test_given_sharding_applies_to_each_low_level_array(mesh):
    q = quantized()
    rows = NamedSharding(mesh, P("x"))
    shardings = {"in_shardings": (rows, None), "out_shardings": {"q": rows, "scaled": None}}
    ours = jit(passing, **shardings)(q, 2.0)
    theirs = jax.jit(passing, **shardings)(q, 2.0)
    assert_same_results(ours, theirs)
    assert ours["q"].values.sharding.spec == P("x") and ours["q"].scale.sharding.spec == P("x")


def test_high_level_values_inside_an_enclosing_jit():
    q = quantized()
    outer = lambda q, f: jit(passing)(q, f + 1.0)  # noqa: E731
    assert_same_results(jit(outer)(q, 3.0), jax.jit(outer)(q, 3.0))


def test_box_made_inside_the_program_as_with_jax():
    def f(x):
        box = Box(x)
        box.set(box.get() * 3)
        return box.get() + 1

    x = jnp.arange(4.0)
    np.testing.assert_array_equal(jit(f)(x), jax.jit(f)(x))
    np.testing.assert_array_equal(jit(f)(x + 1), jax.jit(f)(x + 1))


def test_box_argument_is_written_back_as_with_jax():
    def accumulate(box, x):
        box.set(box.get() + x)
        return x * 2

    ours, theirs = Box(jnp.float32(1.0)), Box(jnp.float32(1.0))
    for x in (1.0, 2.5):
        np.testing.assert_array_equal(jit(accumulate)(ours, x), jax.jit(accumulate)(theirs, x))
        np.testing.assert_array_equal(ours.get(), theirs.get())
    assert float(ours.get()) == 4.5


def test_closed_over_box_that_changes_type_as_with_jax():
    def make():
        box = Box(None)

        def step():
            x = box.get()
            # None -> an int -> a dict holding it -> its successor -> a dict ...
            box.set(jnp.int32(0) if x is None else x["n"] + 1 if isinstance(x, dict)
                    else {"n": x})

        return box, step

    (ours, our_step), (theirs, their_step) = make(), make()
    ours_jit, theirs_jit = jit(our_step), jax.jit(their_step)
    for _ in range(4):
        ours_jit()
        theirs_jit()
        assert jax.tree.structure(ours.get()) == jax.tree.structure(theirs.get())
        for a, b in zip(jax.tree.leaves(ours.get()), jax.tree.leaves(theirs.get())):
            np.testing.assert_array_equal(a, b)
    assert isinstance(ours.get(), dict)


def test_argument_whose_pytree_checks_its_leaves():
    # StatefulPRNG refuses to be built around anything but a typed key and a Ref:
    # shardc traces it by its own values, as jax.jit does.
    draw = lambda rng: rng.uniform(size=5)  # noqa: E731
    ours_rng, theirs_rng = exp_random.stateful_rng(7), exp_random.stateful_rng(7)
    first, second = jit(draw)(ours_rng), jit(draw)(ours_rng)
    np.testing.assert_array_equal(first, jax.jit(draw)(theirs_rng))
    np.testing.assert_array_equal(second, jax.jit(draw)(theirs_rng))
    assert (first != second).all()


def test_lower_and_compile_take_high_level_values(mesh):
    q = quantized()
    rows = NamedSharding(mesh, P("x"))
    ours = jit(passing, in_shardings=(rows, None)).lower(q, 1.0)
    theirs = jax.jit(passing, in_shardings=(rows, None)).lower(q, 1.0)
    # The module is the low-level program's: the quantized value is its two arrays.
    for text in (ours.as_text(), theirs.as_text()):
        assert "tensor<8x4xi8>" in text and "tensor<8xf32>" in text
    assert "@jit_passing" in ours.as_text()
    assert_same_results(ours.compile()(q, 4.0), theirs.compile()(q, 4.0))


def test_compiled_box_program_writes_the_box_back_each_call():
    def accumulate(box):
        box.set(box.get() + 1.0)

    ours, theirs = Box(jnp.float32(1.0)), Box(jnp.float32(1.0))
    ours_compiled = jit(accumulate).lower(ours).compile()
    theirs_compiled = jax.jit(accumulate).lower(theirs).compile()
    for _ in range(3):
        ours_compiled(ours)
        theirs_compiled(theirs)
    np.testing.assert_array_equal(ours.get(), theirs.get())
    assert float(ours.get()) == 4.0


def test_trace_of_high_level_values_lowers_as_lower_does():
    q = quantized()
    traced = jit(passing).trace(q, 1.0)
    assert traced.jaxpr.in_avals[0] == jax.jit(passing).trace(q, 1.0).jaxpr.in_avals[0]
    assert_same_results(traced.lower().compile()(q, 2.0), jax.jit(passing)(q, 2.0))


def test_trace_lowers_for_the_platforms_asked():
    """``trace(...).lower(lowering_platforms=...)`` of a high-level program lowers its
    low-level form for those platforms, as jax's ``Traced.lower`` does."""
    q = quantized()
    ours = jit(passing).trace(q, 1.0).lower(lowering_platforms=("cpu", "tpu"))
    theirs = jax.jit(passing).trace(q, 1.0).lower(lowering_platforms=("cpu", "tpu"))
    assert ours.platforms == ("cpu", "tpu")
    for text in (ours.as_text(), theirs.as_text()):
        assert "tensor<8x4xi8>" in text and "_platform_index" in text


def test_low_level_arguments_named_for_their_high_level_argument():
    # jax names each array a high-level argument lowers to for that argument (the
    # lowering's debug info, and the module's argument locations with it).
    q = quantized()
    ours, theirs = jit(passing).lower(q, 1.0), jax.jit(passing).lower(q, 1.0)
    names = [lowered._lowering.compile_args["all_args_info"].debug_info.arg_names
             for lowered in (ours, theirs)]
    assert names[0] == names[1] == ("q", "q", "factor")
    assert_same_results(ours.compile()(q, 3.0), theirs.compile()(q, 3.0))
