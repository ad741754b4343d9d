"""Results come back with the shardings jax.jit gives them (``shardc.runtime.result_shardings``):
the same numbers and ``.sharding`` objects equal to jax.jit's, spec written as jax writes
it (trailing ``None``s, size-1 axes), on a mesh with the axis names and types jax gives.

Every output is blocked on before the next call: with 2 cores, XLA's CPU collectives
can stall if calls of collective programs overlap.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.extend.sharding import GSPMDSharding
from jax.sharding import AxisType, NamedSharding, auto_axes, reshard, use_abstract_mesh
from jax.sharding import PartitionSpec as P

from shardc.compiler import jit

AUTO, EXPLICIT = AxisType.Auto, AxisType.Explicit


def both(fun, *args, **options):
    """``fun`` run by jax.jit and by shardc, twice each (the second call takes the C++
    dispatch path), each call's results checked equal in numbers and shardings to
    jax.jit's; shardc's last."""
    jax_fun, shardc_fun = jax.jit(fun, **options), jit(fun, **options)
    for _ in range(2):
        expected = jax.block_until_ready(jax_fun(*args))
        got = jax.block_until_ready(shardc_fun(*args))
        for e, g in zip(jax.tree.leaves(expected), jax.tree.leaves(got)):
            if jax.dtypes.issubdtype(e.dtype, jax.dtypes.extended):
                e, g = jax.random.key_data(e), jax.random.key_data(g)
            np.testing.assert_array_equal(np.asarray(g), np.asarray(e))
            assert g.sharding == e.sharding, (g.sharding, e.sharding)
            assert type(g.sharding) is type(e.sharding)
            if isinstance(e.sharding, NamedSharding):
                assert g.sharding.mesh.axis_types == e.sharding.mesh.axis_types
            assert jax.typeof(g).sharding == jax.typeof(e).sharding
    return got


def test_a_result_on_a_size_one_explicit_axis_keeps_it_in_its_spec():
    mesh = jax.make_mesh((1,), ("x",), axis_types=(EXPLICIT,))
    with jax.set_mesh(mesh):
        f = auto_axes(lambda x: x * 2, out_sharding=P("x"))
        out = both(f, jnp.ones((2, 3)))
    assert out.sharding == NamedSharding(mesh, P("x", None))


def test_a_mixed_mesh_result_is_its_type_on_a_singleton_explicit_axis():
    mesh = jax.make_mesh((1, 2), ("x", "y"), axis_types=(EXPLICIT, AUTO))
    with jax.set_mesh(mesh):
        out = both(lambda: jnp.ones((2, 2), jnp.int32, out_sharding=P("x", None)))
    assert jax.typeof(out).sharding.spec == P("x", None)


def test_a_mixed_mesh_result_keeps_the_trailing_none_of_its_type():
    mesh = jax.make_mesh((2, 2), ("x", "y"), axis_types=(EXPLICIT, AUTO))
    with jax.set_mesh(mesh):
        x = jax.device_put(np.arange(16.0).reshape(8, 2), P("x", "y"))
        w = jax.device_put(np.arange(16.0).reshape(2, 8), P("y", None))
        out = both(lambda x, w: jnp.sin(x * 2) @ w, x, w)
    assert out.sharding == NamedSharding(mesh, P("x", None))


def test_an_iota_on_explicit_axes_of_a_mixed_mesh_keeps_its_spec():
    mesh = jax.make_mesh((2, 2, 2), ("x", "y", "z"), axis_types=(AUTO, EXPLICIT, EXPLICIT))
    sharding = NamedSharding(mesh, P(("y", "z"), None))
    with jax.set_mesh(mesh):
        out = both(lambda: jax.lax.broadcasted_iota(jnp.int32, (16, 24), 1,
                                                    out_sharding=sharding))
    assert out.sharding == sharding


def test_a_result_placed_like_an_argument_of_another_mesh_takes_that_meshs_axis_types():
    mesh = jax.make_mesh((2,), ("x",), axis_types=(EXPLICIT,))
    auto_mesh = jax.make_mesh((2,), ("x",), axis_types=(AUTO,))
    with jax.set_mesh(mesh):
        x = jax.device_put(np.arange(16).reshape(8, 2), P("x"))
        with jax.set_mesh(auto_mesh):
            y = jnp.ones(8)
        out_x, out_y = both(lambda x, y: (x, y), x, y)
    assert out_x.sharding.mesh.axis_types == (EXPLICIT,)
    assert out_y.sharding.mesh.axis_types == (AUTO,)


def test_a_result_of_another_abstract_mesh_inside_takes_its_axis_types_and_names():
    mesh = jax.make_mesh((2,), ("x",), axis_types=(EXPLICIT,))

    def to_auto(x):
        with use_abstract_mesh(mesh.abstract_mesh.update_axis_types({"x": AUTO})):
            return reshard(x, P(None, None))

    with jax.set_mesh(mesh):
        out = both(to_auto, jax.device_put(np.arange(16).reshape(8, 2), P("x")))
    assert out.sharding.mesh.axis_types == (AUTO,)

    auto = jax.make_mesh((2, 2), ("x", "y"), axis_types=(AUTO, AUTO))

    def renamed(x):
        with use_abstract_mesh(auto.abstract_mesh.update(axis_sizes=(4, 1),
                                                         axis_names=("a", "b"))):
            return jax.lax.with_sharding_constraint(jnp.sin(x), P(("a", "b"), None)) * 2

    with jax.set_mesh(auto):
        out = both(renamed, jax.device_put(np.arange(16.0).reshape(8, 2), P("x", "y")))
    assert out.sharding.spec == P("a")


def test_an_explicit_result_on_size_one_axes_is_its_type():
    mesh = jax.make_mesh((1, 1), ("x", "y"), axis_types=(EXPLICIT, EXPLICIT))
    with jax.set_mesh(mesh):
        x = jax.device_put(np.arange(8).reshape(4, 2), P("x", "y"))
        out = both(lambda x: reshard(x, P()), x)
    assert out.sharding == NamedSharding(mesh, P(None, None))


def test_the_data_of_prng_keys_a_program_returns_keeps_the_keys_spec():
    mesh = jax.make_mesh((2, 2, 2), ("x", "y", "z"), axis_types=(AUTO,) * 3)
    data = jax.device_put(np.arange(64, dtype=np.uint32).reshape(8, 2, 2, 2),
                          NamedSharding(mesh, P("x", "y", None)))
    out = both(lambda data: jax.random.wrap_key_data(data).T, data)
    assert out.sharding == NamedSharding(mesh, P(None, "y", "x"))
    assert jax.random.key_data(out).sharding == NamedSharding(mesh, P(None, "y", "x"))


@pytest.mark.parametrize("spec", [P("x", "y"), P("x"), P(None, "y")])
def test_a_result_tiled_as_the_first_argument_is_that_arguments_sharding(spec):
    mesh = jax.make_mesh((4, 2), ("x", "y"), axis_types=(AUTO, AUTO))
    x = jax.device_put(np.arange(32.0).reshape(8, 4), NamedSharding(mesh, spec))
    out = both(lambda x: (x * 2, x.sum(0), x.T), x)
    assert out[0].sharding is x.sharding


def test_results_of_a_gspmd_sharded_argument_stay_gspmd_shardings():
    mesh = jax.make_mesh((2, 1), ("x", "y"), axis_types=(AUTO, AUTO))
    named = NamedSharding(mesh, P("x"))
    gspmd = GSPMDSharding(tuple(mesh.devices.flat), named._to_xla_hlo_sharding(2))
    out = both(lambda x: x * 2, jax.device_put(np.arange(8).reshape(8, 1), named))
    assert isinstance(out.sharding, NamedSharding)
    out = both(lambda x: x * 2, jax.device_put(np.arange(8).reshape(8, 1), gspmd))
    assert isinstance(out.sharding, GSPMDSharding)
    assert isinstance(both(lambda x: x * 2, out).sharding, GSPMDSharding)
