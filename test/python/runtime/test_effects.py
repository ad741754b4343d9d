"""Programs with side effects run through shardc as through ``jax.jit``.

Ordered effects (``io_callback(..., ordered=True)``, ``debug.print(...,
ordered=True)``) happen in call order across programs, shardc's and jax's
mixed; mutable arrays (``jax.new_ref``) hold the program's new values after
the call. Each case runs the same function under ``jax.jit`` and compares.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.experimental import io_callback
from jax.sharding import AxisType, NamedSharding, SingleDeviceSharding
from jax.sharding import PartitionSpec as P

from shardc.compiler import jit


@pytest.fixture(scope="module")
def mesh():
    return jax.make_mesh((8,), ("x",), axis_types=(AxisType.Auto,))


def logged(jitter, fun_of_log, *calls):
    """Run ``fun_of_log(log)`` jitted by ``jitter`` on each argument tuple; the log after
    ``jax.effects_barrier()`` and the outputs."""
    log = []
    fun = jitter(fun_of_log(log))
    outputs = [jax.block_until_ready(fun(*args)) for args in calls]
    jax.effects_barrier()
    return log, outputs


def ordered_logger(log):
    def record(x):
        log.append(np.asarray(x).tolist())
    return lambda x: io_callback(record, None, x, ordered=True)


def in_loops(log):
    emit = ordered_logger(log)

    def f(x):
        emit(x)
        x = jax.lax.fori_loop(0, 3, lambda i, c: (emit(c + i), c + 1)[1], x)
        x, _ = jax.lax.scan(lambda c, _: (emit(c) or c * 2, None), x, None, length=2)
        x = jax.lax.cond(x.sum() > 0, lambda v: (emit(-v), v)[1], lambda v: v, x)
        return jax.lax.while_loop(lambda c: c.sum() < 100, lambda c: (emit(c), c * 3)[1], x)
    return f


@pytest.mark.parametrize("program", [in_loops])
def test_ordered_io_callbacks_in_call_order(program):
    calls = [(jnp.arange(2.0),), (jnp.ones(2),), (jnp.full(2, 3.0),)]
    ours = logged(jit, program, *calls)
    theirs = logged(jax.jit, program, *calls)
    assert ours[0] == theirs[0] and len(ours[0]) > 9
    np.testing.assert_array_equal(ours[1], theirs[1])


def test_ordered_effects_stay_ordered_between_shardc_and_jax_programs():
    log = []
    ours, theirs = jit(ordered_logger(log)), jax.jit(ordered_logger(log))
    for i in range(4):
        ours(jnp.float32(2 * i))
        theirs(jnp.float32(2 * i + 1))
    jax.effects_barrier()
    assert log == [float(i) for i in range(8)]


def test_ordered_debug_print_matches_jax(capsys):
    def f(x):
        jax.debug.print("x={x}", x=x, ordered=True)
        y = jax.lax.fori_loop(0, 2, lambda i, c: (jax.debug.print("i={i}", i=i, ordered=True),
                                                   c + i)[1], x)
        return y * 2

    printed = []
    for jitter in (jit, jax.jit):
        g = jitter(f)
        outputs = [g(jnp.float32(v)) for v in (1, 2)]
        jax.effects_barrier()
        printed.append((capsys.readouterr().out, [float(o) for o in outputs]))
    assert printed[0] == printed[1]
    assert printed[0][0] == "x=1.0\ni=0\ni=1\nx=2.0\ni=0\ni=1\n"


def test_ordered_effects_under_grad_and_vmap(capsys):
    def f(x):
        jax.debug.print("primal {x}", x=x, ordered=True)
        return jnp.sin(x).sum()

    def g(x):
        batched = jax.vmap(lambda v: (jax.debug.print("row {v}", v=v, ordered=True), v + 1)[1])
        return jax.grad(f)(x), batched(x)

    printed = []
    for jitter in (jit, jax.jit):
        out = jitter(g)(jnp.arange(3.0))
        jax.effects_barrier()
        printed.append((capsys.readouterr().out, out))
    assert printed[0][0] == printed[1][0]
    assert "primal [0. 1. 2.]" in printed[0][0]
    jax.tree.map(np.testing.assert_allclose, printed[0][1], printed[1][1])


def test_ordered_debug_print_on_several_devices_is_refused_as_by_jax(mesh):
    def f(x):
        jax.debug.print("{x}", x=x, ordered=True)
        return x + 1

    x = jax.device_put(jnp.arange(8.0), NamedSharding(mesh, P("x")))
    message = "The following ordered effects are not supported for more than 1 device"
    with pytest.raises(ValueError, match=message):
        jax.jit(f)(x)
    with pytest.raises(ValueError, match=message):
        jit(f)(x)


def test_ordered_io_callback_on_a_sharded_program(mesh):
    calls = [(jax.device_put(jnp.arange(8.0) * i, NamedSharding(mesh, P("x"))),)
             for i in range(3)]

    def program(log):
        emit = ordered_logger(log)
        return lambda x: (emit(x.sum()), x * 2)[1]

    ours, theirs = logged(jit, program, *calls), logged(jax.jit, program, *calls)
    assert ours[0] == theirs[0] == [0.0, 28.0, 56.0]
    for a, b in zip(ours[1], theirs[1]):
        np.testing.assert_array_equal(a, b)
        assert a.sharding.is_equivalent_to(b.sharding, 1)


def test_callback_on_a_named_device_of_a_sharded_program(mesh):
    device = jax.devices()[-1]
    sharding = NamedSharding(mesh, P("x"))

    def f(x):
        return jax.pure_callback(lambda v: v + np.arange(8, dtype=v.dtype), x, x,
                                 sharding=SingleDeviceSharding(device))

    x = jnp.arange(8.0)
    ours = jit(f, in_shardings=sharding, out_shardings=sharding)
    theirs = jax.jit(f, in_shardings=sharding, out_shardings=sharding)
    np.testing.assert_array_equal(ours(x), theirs(x))
    index = list(mesh.devices.flat).index(device)
    assert f"sdy.mesh @maximal_mesh_{index} = <[], device_ids=[{index}]>" in \
        ours.lower(x).as_text()


# -- mutable arrays ------------------------------------------------------------


def add_into(ref, x):
    ref[...] += x
    return x * 2


def run_both(fun, make_refs, *args):
    """``fun(*refs, *args)`` under shardc and jax.jit, each with its own fresh refs:
    the outputs and the refs' contents after the call."""
    results = []
    for jitter in (jit, jax.jit):
        refs = make_refs()
        out = jitter(fun)(*refs, *args)
        results.append((out, [np.asarray(r[...]) for r in refs], refs))
    return results


def test_ref_argument_updated_in_place(mesh):
    ((out, contents, refs), (jax_out, jax_contents, _)) = run_both(
        add_into, lambda: [jax.new_ref(jax.device_put(jnp.zeros(8),
                                                      NamedSharding(mesh, P("x"))))],
        jnp.arange(8.0))
    np.testing.assert_array_equal(out, jax_out)
    np.testing.assert_array_equal(contents, jax_contents)
    assert refs[0].sharding.spec == P("x")  # the Ref keeps its layout


def test_closed_over_ref_and_ref_made_inside():
    counter = jax.new_ref(jnp.zeros(()))
    jax_counter = jax.new_ref(jnp.zeros(()))

    def make(ref):
        def f(x):
            inside = jax.new_ref(x)
            inside[...] *= 3
            ref[...] += inside[...].sum()
            return inside[...]
        return f

    for _ in range(2):
        np.testing.assert_array_equal(jit(make(counter))(jnp.arange(3.0)),
                                      jax.jit(make(jax_counter))(jnp.arange(3.0)))
    assert float(counter[...]) == float(jax_counter[...]) == 18.0


def test_gradients_through_refs_match_jax():
    def loss(x):
        acc = jax.new_ref(jnp.zeros_like(x))
        acc[...] += jnp.sin(x)
        acc[...] *= x
        return acc[...].sum()

    x = jnp.linspace(0.0, 1.0, 5)
    np.testing.assert_allclose(jax.grad(jit(loss))(x), jax.grad(jax.jit(loss))(x), rtol=1e-6)
    np.testing.assert_allclose(jit(jax.grad(loss))(x), jax.jit(jax.grad(loss))(x), rtol=1e-6)


def test_aliased_refs_refused_as_by_jax():
    ref = jax.new_ref(0.0)
    add = jit(lambda x_ref, y_ref: x_ref[...] + y_ref[...])
    with pytest.raises(ValueError, match="appeared at both x_ref and y_ref"):
        add(ref, ref)
    assert float(add(ref, jax.new_ref(1.0))) == 1.0
    with pytest.raises(ValueError, match="appeared at both x_ref and y_ref"):
        add(ref, ref)  # the compiled program is reused, the check is made again
    with pytest.raises(ValueError, match="closed over and passed as the argument y_ref"):
        jit(lambda y_ref: ref[...] + y_ref[...])(ref)
