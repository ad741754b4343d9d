"""One executable per lowering, as jax.jit keeps one: calls, ``lower(...).compile()``
and ``trace(...).lower().compile()`` of one jitted function find one another's, in
either order, and compile again exactly where jax.jit does (other compiler options,
``jax.clear_caches()``). Compiles are counted by jax's backend compile events."""

import contextlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax._src import dispatch  # the backend compile event's name
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P
from jaxlib.mlir import ir

from shardc.compiler import jit

JITS = pytest.mark.parametrize("jitted", [jax.jit, jit], ids=["jax", "shardc"])

_EVENTS: list[str] = []
jax.monitoring.register_event_duration_secs_listener(
    lambda name, *_, **__: _EVENTS.append(name) if name == dispatch.BACKEND_COMPILE_EVENT
    else None)


@contextlib.contextmanager
def compiles():
    before = len(_EVENTS)
    yield lambda: len(_EVENTS) - before


def _steps(jitted, x) -> list[int]:
    """Backend compiles per step of a sequence mixing calls and AOT compiles."""
    counts = []

    def step(thunk):
        with compiles() as count:
            jax.block_until_ready(thunk())
        counts.append(count())

    f = jitted(lambda v: jnp.sin(v) * 2)
    step(lambda: f(x))
    step(lambda: f.lower(x).compile()(x))
    step(lambda: f.trace(x).lower().compile()(x))
    step(lambda: f.lower(x).compile({"xla_cpu_enable_fast_math": False})(x))
    g = jitted(lambda v: jnp.cos(v) + 1)
    step(lambda: g.lower(x).compile()(x))
    step(lambda: g(x))
    step(lambda: g.lower(x).compile())
    jax.clear_caches()
    step(lambda: g.lower(x).compile())
    step(lambda: g(x))
    return counts


def test_calls_and_compiles_share_one_executable_as_jax_jits():
    x = jnp.arange(8.0)
    ours, theirs = _steps(jit, x), _steps(jax.jit, x)
    assert ours == theirs
    # (A call first, then AOT twice: compiled once; AOT first, then a call: once.)
    assert ours[:3] == [1, 0, 0] and ours[4:7] == [1, 0, 0]


@JITS
def test_on_a_mesh_and_with_static_and_donated_arguments(jitted):
    mesh = jax.make_mesh((4, 2), ("x", "y"))
    x = jax.device_put(jnp.arange(16.0).reshape(8, 2), NamedSharding(mesh, P("x")))
    f = jitted(lambda v, k: v * k, static_argnums=1,
               out_shardings=NamedSharding(mesh, P("x", "y")))
    expected = jax.jit(lambda v: v * 3)(x)
    with compiles() as count:
        compiled = f.lower(x, 3).compile()
        called = f(x, 3)
        again = f.lower(x, 3).compile(device_assignment=tuple(mesh.devices.flat))
    assert count() == 1
    for out in (compiled(x), called, again(x)):
        np.testing.assert_array_equal(out, expected)
        assert out.sharding == NamedSharding(mesh, P("x", "y"))
    with compiles() as count:
        f.lower(x, 4).compile()
    assert count() == 1  # another static value, another program

    h = jitted(lambda v: v + 1, donate_argnums=0)
    ones = [jnp.ones(3) for _ in range(2)]
    with compiles() as count:
        compiled = h.lower(ones[0]).compile()
        out = h(ones[1])
    assert count() == 1 and compiled.args_info[0][0].donated
    np.testing.assert_array_equal(out, 2 * np.ones(3))


def test_a_module_changed_in_place_is_compiled_again():
    """A ``Lowered``'s module is its own to change: its compile() is of the change."""
    f = jit(lambda v: jnp.sin(v) * 2)
    x = jnp.arange(4.0)
    added, multiplied = np.sin(np.asarray(x)) + 2, np.sin(np.asarray(x)) * 2
    f(x)
    lowered = f.lower(x)
    changed = str(lowered.module).replace("stablehlo.multiply", "stablehlo.add")
    with lowered.module.context:
        parsed = ir.Module.parse(changed)
        for op in list(lowered.module.body.operations):
            op.operation.erase()
        for op in parsed.body.operations:
            op.operation.clone(ir.InsertionPoint(lowered.module.body))
    with compiles() as count:
        np.testing.assert_allclose(lowered.compile()(x), added, rtol=1e-6)
    assert count() == 1
    # The jit's own program is untouched, and a new lowering finds it again.
    with compiles() as count:
        np.testing.assert_allclose(f.lower(x).compile()(x), multiplied, rtol=1e-6)
        np.testing.assert_allclose(f(x), multiplied, rtol=1e-6)
    assert count() == 0


def test_an_executable_found_again_keeps_its_unsharded_reference():
    f = jit(lambda v: jnp.tanh(v) @ v.T)
    x = jnp.arange(12.0).reshape(4, 3) / 10
    f(x)
    compiled = f.lower(x).compile()
    assert compiled.reference is not None
    compiled.verify(x)
    np.testing.assert_allclose(compiled(x), jax.jit(lambda v: jnp.tanh(v) @ v.T)(x),
                               rtol=1e-6)
