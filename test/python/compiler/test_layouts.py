"""Device-local layouts through shardc's jit (``Format`` leaves of in/out shardings, the
layouts of committed arguments), compared with jax.jit: values, formats, shardings."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.experimental.layout import Format, Layout
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P

from shardc.compiler import jit
from shardc.dialects.errors import LayoutMismatchError

ROW_MAJOR, COLUMN_MAJOR = Layout(major_to_minor=(0, 1)), Layout(major_to_minor=(1, 0))


@pytest.fixture
def sharding():
    mesh = jax.make_mesh((2, 2), ("x", "y"), axis_types=(AxisType.Auto,) * 2)
    return NamedSharding(mesh, P("x", "y"))


def data(shape=(16, 16)):
    return np.arange(np.prod(shape), dtype=np.float32).reshape(shape)


def both(fun, **options):
    return jit(fun, **options), jax.jit(fun, **options)


def test_committed_argument_in_another_layout_gives_jax_jit_values(sharding):
    # The wrong-value case: an argument laid out column-major, passed to a function
    # already compiled for the default layout, was read as if row-major.
    x = data()
    row = jax.device_put(x, sharding)
    column = jax.device_put(x, Format(COLUMN_MAJOR, sharding))
    ours, theirs = both(lambda a: a @ a.T + a)
    for arg in (row, column, row):
        np.testing.assert_array_equal(ours(arg), theirs(arg))
    np.testing.assert_array_equal(ours(column), x @ x.T + x)
    compiled = ours.lower(column).compile()
    assert compiled.input_formats == theirs.lower(column).compile().input_formats
    assert compiled.input_formats[0][0].layout.major_to_minor == (1, 0)


def test_compiled_refuses_a_committed_argument_in_another_layout(sharding):
    x = data()
    column = jax.device_put(x, Format(COLUMN_MAJOR, sharding))
    ours, theirs = both(lambda a: a * 2)
    row = jax.device_put(x, sharding)
    with pytest.raises(ValueError, match="compiled for input layouts that disagree"):
        theirs.lower(row).compile()(column)
    with pytest.raises(LayoutMismatchError, match="compiled for input layouts that disagree"):
        ours.lower(row).compile()(column)


def test_uncommitted_argument_is_copied_into_the_compiled_layout(sharding):
    # An uncommitted result of a program with an AUTO output layout lies transposed;
    # jax.jit 0.10.2 reads it as if it did not (x + 1 where x.T + 1 is due), shardc
    # copies it into the layout compiled, on every call (never the C++ fast path).
    x = data()
    transposed = jit(lambda a: a.T, out_shardings=Format(Layout.AUTO))(x)
    assert not transposed.committed
    assert transposed.format.layout.major_to_minor == (1, 0)
    ours, plain = jit(lambda a: a + 1), jax.device_put(x)
    for _ in range(3):
        np.testing.assert_array_equal(ours(transposed), x.T + 1)
        np.testing.assert_array_equal(ours(plain), x + 1)


def test_auto_layouts_match_jax_jit(sharding):
    x = data()
    sds = jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=sharding)
    auto = Format(Layout.AUTO)
    ours, theirs = both(lambda a: a.T, in_shardings=auto, out_shardings=auto)
    compiled, reference = ours.lower(sds).compile(), theirs.lower(sds).compile()
    assert compiled.input_formats == reference.input_formats
    assert compiled.output_formats == reference.output_formats
    assert ours.lower(sds).as_text().count('mhlo.layout_mode = "auto"') == 2
    out = compiled(jax.device_put(x, sharding))
    np.testing.assert_array_equal(out, x.T)
    assert out.format == compiled.output_formats == reference.output_formats
    assert out.sharding == reference.output_formats.sharding


def test_concrete_layouts_in_and_out(sharding):
    x = data()
    arr = jax.device_put(x, Format(COLUMN_MAJOR, sharding))
    given = Format(COLUMN_MAJOR, sharding)
    ours, theirs = both(lambda a: a * a, in_shardings=given, out_shardings=given)
    out, expected = ours(arr), theirs(arr)
    np.testing.assert_array_equal(out, expected)
    assert out.format == expected.format
    assert out.format.layout.major_to_minor == (1, 0) and out.sharding == sharding
    text = ours.lower(arr).as_text()
    assert text.count('mhlo.layout_mode = "{0,1}"') == 2
    # The stages describe the results with the format asked for, as jax's do.
    assert ours.lower(arr).out_info.format == theirs.lower(arr).out_info.format
    assert ours.eval_shape(arr).format == theirs.eval_shape(arr).format == given
    # A default layout given is no layout at all, as in jax's module.
    assert "layout_mode" not in jit(lambda a: a, in_shardings=Format(ROW_MAJOR, sharding)
                                    ).lower(jax.device_put(x, sharding)).as_text()


@pytest.mark.parametrize("layout", [ROW_MAJOR, COLUMN_MAJOR], ids=["default", "column"])
def test_trace_describes_results_with_the_layout_asked_for(sharding, layout):
    # jax's Traced.out_info keeps the layout given, the default one too; only lowering
    # drops a default layout (Lowered.out_info: no layout).
    given = Format(layout, sharding)
    arr = jax.device_put(data((128, 16)), given)
    ours, theirs = both(lambda a: a * a, in_shardings=given, out_shardings=given)
    for stage in (lambda f: f.trace(arr).out_info, lambda f: f.eval_shape(arr),
                  lambda f: f.lower(arr).out_info):
        assert stage(ours).format == stage(theirs).format
    assert ours.eval_shape(arr).format == given


def test_out_layout_of_a_jit_call(sharding):
    x = data((16, 128))
    arr = jax.device_put(x, sharding)
    ours, theirs = both(lambda a: a.T, out_shardings=Format(
        COLUMN_MAJOR, NamedSharding(sharding.mesh, P("y", "x"))))
    out, expected = ours(arr), theirs(arr)
    np.testing.assert_array_equal(out, expected)
    assert out.format == expected.format
    assert out.format.layout.major_to_minor == (1, 0)
    assert out.sharding == expected.sharding


def test_layout_errors_are_jax_errors(sharding):
    x = data()
    row = jax.device_put(x, sharding)
    for fun in both(lambda a: a, in_shardings=Format(COLUMN_MAJOR, sharding)):
        with pytest.raises(ValueError, match="Layout passed to jit does not match"):
            fun(row)
    three_d = Format(Layout(major_to_minor=(0, 1, 2)), sharding)
    for fun in both(lambda a: a, in_shardings=three_d):
        with pytest.raises(ValueError, match="Length of major_to_minor and the rank"):
            fun(x)
    for make in (jit, jax.jit):
        with pytest.raises(ValueError, match="does not accept device-local layouts"):
            make(lambda a: a, in_shardings=Layout.AUTO)


def test_donation_with_layouts(sharding):
    x = data((128, 16))
    given = Format(COLUMN_MAJOR, sharding)
    ours = jit(lambda a: a * a, in_shardings=given, out_shardings=given, donate_argnums=0)
    arr = jax.device_put(x, given)
    np.testing.assert_array_equal(ours(arr), x * x)
    assert arr.is_deleted()
    for fun in both(lambda a: a * 2, donate_argnums=0, in_shardings=Format(Layout.AUTO)):
        with pytest.raises(ValueError, match=r"Did you mean to set the.*output layout"):
            fun(np.arange(8.0, dtype=np.float32))


def test_shape_dtype_struct_with_a_format(sharding):
    x = data()
    formats = jit(lambda a: a.T, out_shardings=Format(Layout.AUTO)).lower(
        jax.device_put(x, sharding)).compile().output_formats
    sds = jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=formats)
    ours, theirs = both(lambda a: a * 2)
    assert ours.lower(sds).compile().input_formats == theirs.lower(sds).compile().input_formats
    assert ours.lower(sds).compile().input_formats[0][0] == formats


def test_four_bit_arguments_are_in_their_compiled_layout():
    # jaxlib's CPU arrays of 4-bit types do not record the element size the
    # executable's layout names: the same dimension order is the same layout.
    x = jax.device_put(np.arange(4, dtype=jnp.int4), jax.devices()[0])
    ours, theirs = both(lambda a: jax.lax.bitcast_convert_type(a, jnp.uint4))
    np.testing.assert_array_equal(ours(x), theirs(x))
    np.testing.assert_array_equal(ours.lower(x).compile()(x), theirs(x))
