"""A jit call places its arguments with implicit transfers, as jax.jit's dispatch does:
jax's transfer guards refuse them under ``"disallow"`` and ``"disallow_explicit"``
(with jax's error, where ``jax.device_put``'s explicit transfers pass ``"disallow"``),
and never see arguments already where they run."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P

from shardc.compiler import jit

WRAPS = pytest.mark.parametrize("wrap", [jax.jit, jit], ids=["jax.jit", "shardc"])


def error_of(call):
    try:
        jax.block_until_ready(call())
    except Exception as error:  # noqa: BLE001 - the class is what is compared
        return error
    return None


@pytest.mark.parametrize("guard", ["disallow", "disallow_explicit"])
def test_host_to_device_disallowed_as_jax_jit(guard):
    errors = []
    for wrap in (jax.jit, jit):
        f = wrap(lambda x: x + 1)
        with jax.transfer_guard(guard):
            errors.append(error_of(lambda: f(np.ones(3, np.float32))))
    jax_error, error = errors
    assert jax_error is not None and type(error) is type(jax_error)
    assert "Disallowed host-to-device transfer" in str(error)


@WRAPS
def test_explicit_put_allowed_where_implicit_is_not(wrap):
    f = wrap(lambda x, y: x + y)
    with jax.transfer_guard("disallow"):
        x = jax.device_put(np.ones(3, np.float32))
        out = f(x, x)
        jax.block_until_ready(out)
    with jax.transfer_guard("allow"):
        np.testing.assert_array_equal(out, np.full(3, 2.0, np.float32))


def test_device_to_device_disallowed_as_jax_jit():
    with jax.transfer_guard("allow"):
        x = jnp.ones(1)
    errors = []
    for wrap in (jax.jit, jit):
        f = wrap(lambda v: v, device=jax.devices()[1])
        with jax.transfer_guard_device_to_device("disallow"):
            errors.append(error_of(lambda: f(x)))
    jax_error, error = errors
    assert jax_error is not None and type(error) is type(jax_error)
    assert "Disallowed device-to-device transfer" in str(error)


@WRAPS
def test_arguments_in_place_need_no_transfer(wrap):
    mesh = jax.make_mesh((4, 2), ("x", "y"), axis_types=(AxisType.Auto,) * 2)
    with jax.transfer_guard("allow"):
        x = jax.device_put(jnp.arange(16.0).reshape(8, 2), NamedSharding(mesh, P("x", "y")))
    f = wrap(lambda v: v * 2)
    with jax.transfer_guard("disallow"):
        out = f(x)
        jax.block_until_ready(out)
    with jax.transfer_guard("allow"):
        np.testing.assert_array_equal(out, np.arange(16.0).reshape(8, 2) * 2)
    assert out.sharding == x.sharding


@pytest.mark.parametrize("value", [1, 2.0, 1j, True, np.float32(1)],
                         ids=["int", "float", "complex", "bool", "np.float32"])
def test_refused_python_scalar_named_as_jax_jit_names_it(value):
    # jax.jit's dispatch places a Python scalar weakly typed, and its transfer guard
    # says so: aval=ShapedArray(int32[], weak_type=True).
    messages = []
    for wrap in (jax.jit, jit):
        f = wrap(lambda x: x + 1)
        with jax.transfer_guard("disallow"):
            messages.append(str(error_of(lambda: f(value))))
    jax_message, message = messages
    assert "Disallowed host-to-device transfer" in jax_message
    assert message == jax_message


@pytest.mark.parametrize("value", [3, 2.5, True])
def test_python_scalar_arguments_compute_as_jax_jit(value):
    expected = jax.jit(lambda x: x * 2)(value)
    out = jit(lambda x: x * 2)(value)
    assert out.dtype == expected.dtype and out.weak_type == expected.weak_type
    np.testing.assert_array_equal(out, expected)
