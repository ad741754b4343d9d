"""Strict mode: padding, ops without a rule and implicit reshards become errors with file:line."""

import inspect

import jax
import jax.numpy as jnp
import pytest
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

import shardc.compiler as sc
from shardc.compiler.checks.strict import StrictModeError, StrictOptions


def _mesh():
    return jax.make_mesh((4,), ("x",), axis_types=(jax.sharding.AxisType.Auto,))


def _line(fun, offset):
    return inspect.getsourcelines(fun)[1] + offset


def _transpose(a):
    return a.T + 1.0


def test_error_class_is_a_value_error_with_location():
    assert issubclass(StrictModeError, ValueError) and sc.StrictModeError is StrictModeError


def _slice(a):
    return a[:6] * 2.0  # propagation shards the 6 elements over 4 devices: padded


def test_padding_is_an_error():
    jitted = sc.jit(_slice, in_shardings=NamedSharding(_mesh(), P("x")), strict=True)
    with pytest.raises(StrictModeError, match=r"not divisible by 4.*\[indivisible-dimension\]") \
            as error:
        jitted.lower(jnp.ones(8))
    assert f"test_strict.py:{_line(_slice, 1)}" in str(error.value)
    sc.jit(_slice, in_shardings=NamedSharding(_mesh(), P("x"))).lower(jnp.ones(8))


def test_implicit_reshard_above_threshold_is_an_error():
    ins = NamedSharding(_mesh(), P("x", None))
    jitted = sc.jit(_transpose, in_shardings=ins, out_shardings=ins, strict=True)
    with pytest.raises(StrictModeError) as error:
        jitted.lower(jnp.ones((16, 16)))
    assert f"test_strict.py:{_line(_transpose, 1)}" in str(error.value)
    assert "[implicit-reshard]" in str(error.value)
    big = StrictOptions(reshard_threshold_bytes=1 << 20)
    sc.jit(_transpose, in_shardings=ins, out_shardings=ins, strict=big).lower(jnp.ones((16, 16)))


def _kernel(a):
    call = jax.ffi.ffi_call("strict_opaque_kernel", jax.ShapeDtypeStruct(a.shape, a.dtype))
    return call(a)


def test_op_without_rule_is_an_error():
    jitted = sc.jit(_kernel, in_shardings=NamedSharding(_mesh(), P("x")), strict=True)
    with pytest.warns(UserWarning), pytest.raises(StrictModeError) as error:
        jitted.lower(jnp.ones(8))
    message = str(error.value)
    assert "custom call @strict_opaque_kernel has no sharding rule" in message
    assert f"test_strict.py:{_line(_kernel, 2)}" in message and "register_sharding_rule" in message
