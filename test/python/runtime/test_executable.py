"""A shardc ``Compiled`` as jax's stages and ``jax.experimental.serialize_executable``
read it (``shardc.runtime.executable``): its executable's flat avals, shardings and
layouts, the call parameters, and serialized programs loaded in this process and in
a fresh one, compared with ``jax.jit``'s."""

import os
import pickle
import subprocess
import sys
import textwrap

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax._src import test_util as jtu
from jax.experimental.serialize_executable import deserialize_and_load, serialize
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P

from shardc.compiler import jit


@pytest.fixture(scope="module")
def mesh():
    return jax.make_mesh((4, 2), ("x", "y"), axis_types=(AxisType.Auto,) * 2)


def program(x, w):
    return jnp.sin(x) @ w, x.sum()


def sharded_program(mesh):
    return jit(program, in_shardings=(None, P("y")), out_shardings=(P("x"), None), mesh=mesh)


def reference(mesh):
    return jax.jit(program, in_shardings=(NamedSharding(mesh, P("x", "y")),
                                          NamedSharding(mesh, P("y"))),
                   out_shardings=(NamedSharding(mesh, P("x")), None))


def arguments(mesh):
    x = jax.device_put(jnp.arange(32.0).reshape(8, 4), NamedSharding(mesh, P("x", "y")))
    return x, jnp.ones((4, 6))


def assert_same_as_jax(outputs, expected):
    for ours, theirs in zip(outputs, expected, strict=True):
        np.testing.assert_array_equal(ours, theirs)
        assert ours.sharding == theirs.sharding


def test_executable_attributes_are_jaxs():
    const = jnp.arange(16.0) + 42.0

    def f(x, y_unused):
        return const[0:8] + x

    x, y = jnp.arange(8.0), jnp.arange(24.0)
    ours = jit(f).lower(x, y).compile()
    theirs = jax.jit(f).lower(x, y).compile()
    # Constants stay inside the program (jax's default): none passed as arguments.
    assert ours._params.const_args == theirs._params.const_args == []
    assert ours._params.in_tree == theirs._params.in_tree and not ours._params.no_kwargs
    assert ours._executable.in_avals == list(theirs._executable.in_avals)
    # The unused argument is not the executable's (keep_unused=False, as jax's).
    assert ours._executable._kept_var_idx == theirs._executable._kept_var_idx == {0}
    assert ours._executable._all_args_info.in_avals == \
        list(theirs._executable._all_args_info.in_avals)
    assert ours.in_avals == theirs.in_avals and ours.input_shardings == theirs.input_shardings
    assert ours._executable._in_shardings == list(theirs._executable._in_shardings)
    assert [a.shape for a in ours._executable.out_avals] == \
        [a.shape for a in theirs._executable.out_avals]
    assert ours._executable._xla_out_layouts == list(theirs._executable._xla_out_layouts)
    np.testing.assert_array_equal(ours(x, y), theirs(x, y))
    # The second call runs in jax's C++ dispatch, not jax's Python call of a Compiled.
    with jtu.count_pjit_cpp_cache_miss() as cpp, jtu.count_aot_jit_cpp_cache_miss() as aot:
        ours(x, y)
    assert (cpp(), aot()) == (0, 0)


def test_serialized_program_runs_in_this_process(mesh):
    x, w = arguments(mesh)
    compiled = sharded_program(mesh).lower(x, w).compile()
    loaded = deserialize_and_load(*serialize(compiled))
    assert isinstance(loaded, jax.stages.Compiled)
    assert_same_as_jax(loaded(x, w), reference(mesh)(x, w))
    assert_same_as_jax(loaded(x, w), reference(mesh)(x, w))  # again, by the C++ dispatch
    assert loaded.input_shardings == compiled.input_shardings
    assert loaded.output_shardings == compiled.output_shardings
    assert loaded.in_avals == compiled.in_avals and loaded.args_info == compiled.args_info
    # Host data is placed as the program wants it, as by shardc's own Compiled.
    assert_same_as_jax(loaded(np.asarray(x), np.asarray(w)), reference(mesh)(x, w))


def test_serialized_program_on_one_device_donates():
    x = jnp.arange(8.0)
    compiled = jit(lambda a: a * 2, donate_argnums=0).lower(x).compile()
    loaded = deserialize_and_load(*serialize(compiled))
    argument = jnp.arange(8.0)
    np.testing.assert_array_equal(loaded(argument), x * 2)
    assert argument.is_deleted()
    assert loaded.args_info[0][0].donated


def test_serialized_program_without_its_unused_argument():
    """A program that does not take an unused argument loads as one (its shardings and
    types for every argument, as jax's), and calls leave that argument out."""
    x, unused = jnp.arange(8.0), np.ones(3, np.float32)
    compiled = jit(lambda a, b: a * 2).lower(x, unused).compile()
    loaded = deserialize_and_load(*serialize(compiled))
    theirs = jax.jit(lambda a, b: a * 2).lower(x, unused).compile()
    assert loaded.input_shardings == compiled.input_shardings == theirs.input_shardings
    assert loaded.in_avals == compiled.in_avals == theirs.in_avals
    for _ in range(2):  # the first call, then jax's C++ dispatch
        with jax.transfer_guard_host_to_device("disallow"):
            out = loaded(x, unused)
        np.testing.assert_array_equal(out, x * 2)


def test_serialized_program_runs_in_a_fresh_process(mesh, tmp_path):
    x, w = arguments(mesh)
    path = tmp_path / "program.pickle"
    path.write_bytes(pickle.dumps(serialize(sharded_program(mesh).lower(x, w).compile())))
    expected = reference(mesh)(x, w)
    # The fresh process imports jax, not shardc (the pickle brings shardc's classes).
    script = textwrap.dedent(
        f"""
        import os
        os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=8"
        import pickle
        import jax, jax.numpy as jnp, numpy as np
        from jax.experimental.serialize_executable import deserialize_and_load
        from jax.sharding import AxisType, NamedSharding, PartitionSpec as P
        loaded = deserialize_and_load(*pickle.loads(open({str(path)!r}, "rb").read()))
        mesh = jax.make_mesh((4, 2), ("x", "y"), axis_types=(AxisType.Auto,) * 2)
        x = jax.device_put(jnp.arange(32.0).reshape(8, 4), NamedSharding(mesh, P("x", "y")))
        product, total = loaded(x, jnp.ones((4, 6)))
        print(product.sharding.spec, total.sharding.spec)
        print(np.asarray(product).tolist(), float(total))
        """
    )
    run = subprocess.run([sys.executable, "-P", "-c", script], capture_output=True, text=True,
                         timeout=120)
    assert run.returncode == 0, run.stderr
    specs, values = run.stdout.splitlines()
    assert specs == f"{expected[0].sharding.spec} {expected[1].sharding.spec}"
    assert values == f"{np.asarray(expected[0]).tolist()} {float(expected[1])}"


def test_closed_over_ref_is_refused_as_by_jax():
    x_ref = jax.new_ref(0)

    def f(x):
        x_ref[...] += x

    with pytest.raises(ValueError, match="can't serialize with a closed-over mutable array ref"):
        serialize(jit(f).lower(1).compile())
    with pytest.raises(ValueError, match="can't serialize with a closed-over mutable array ref"):
        serialize(jax.jit(f).lower(1).compile())


def test_program_with_host_callbacks_is_not_serializable():
    def f(x):
        return jax.pure_callback(np.sin, jax.ShapeDtypeStruct(x.shape, x.dtype), x)

    with pytest.raises(ValueError, match="Compilation does not support serialization"):
        serialize(jit(f).lower(jnp.ones(4)).compile())


def test_constants_stay_inside_with_simplified_constants_at_start_up():
    # jax_use_simplified_jaxpr_constants set when jax starts hoists jax.jit's closed-over
    # constants into leading arguments; shardc keeps them inside its module, as
    # jax.export does, so its programs take the call's arguments alone.
    script = textwrap.dedent(
        """
        import jax, jax.numpy as jnp, numpy as np
        from shardc.compiler import jit
        const = jnp.arange(16.0) + 42.0
        f = lambda x: const[0:8] + x
        x = jnp.arange(8.0)
        theirs = jax.jit(f).lower(x).compile()
        ours = jit(f).lower(x)
        compiled = ours.compile()
        assert len(theirs._params.const_args) == 1, theirs._params.const_args
        assert ours._lowering.const_args == [] and compiled._params.const_args == []
        assert len(compiled._executable.in_avals) == 1
        np.testing.assert_array_equal(compiled(x), theirs(x))
        np.testing.assert_array_equal(jit(f)(x), theirs(x))
        print("ok")
        """
    )
    env = dict(os.environ, JAX_USE_SIMPLIFIED_JAXPR_CONSTANTS="1")
    run = subprocess.run([sys.executable, "-P", "-c", script], capture_output=True, text=True,
                         timeout=120, env=env)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "ok"
