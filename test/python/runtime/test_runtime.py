"""Compiling and running through shardc's runtime gives what ``jax.jit`` gives.

Every output is blocked on before the next call: with 2 cores, XLA's CPU
collectives can stall if calls of collective programs overlap.
"""

import dataclasses
import functools
import weakref

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax._src import core, dtypes, earray
from jax._src.interpreters import pxla
from jax.sharding import AbstractMesh, AxisType, Mesh, NamedSharding
from jax.sharding import PartitionSpec as P
from jaxlib.mlir import ir

from shardc.compiler import jit
from shardc.compiler.function import calling
from shardc.dialects import jax_private
from shardc.dialects.errors import (
    ArgumentShardingError,
    DeviceMismatchError,
    InvalidArgumentError,
    PytreeMismatchError,
)

AUTO = AxisType.Auto
RTOL, ATOL = 1e-5, 1e-5  # float32 sums in a different order across shards


@pytest.fixture(scope="module")
def mesh():
    return jax.make_mesh((4, 2), ("x", "y"), axis_types=(AUTO, AUTO))


def put(mesh, value, spec):
    return jax.device_put(value, NamedSharding(mesh, spec))


def rand(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def block(tree):
    return jax.block_until_ready(tree)


def check_like_jax(fun, args, in_shardings, out_shardings, mesh, **jit_kwargs):
    """Run ``fun`` through shardc and jax.jit; compare values and shardings."""
    ours = block(jit(fun, in_shardings, out_shardings, mesh=mesh, **jit_kwargs)(*args))
    to_named = lambda s: NamedSharding(mesh, s) if isinstance(s, P) else s  # noqa: E731
    is_leaf = lambda s: s is None or isinstance(s, (P, NamedSharding))  # noqa: E731
    theirs = block(
        jax.jit(
            fun,
            in_shardings=jax.tree.map(to_named, in_shardings, is_leaf=is_leaf),
            out_shardings=jax.tree.map(to_named, out_shardings, is_leaf=is_leaf),
            **jit_kwargs,
        )(*args)
    )
    assert jax.tree.structure(ours) == jax.tree.structure(theirs)
    for mine, ref in zip(jax.tree.leaves(ours), jax.tree.leaves(theirs)):
        assert isinstance(mine, jax.Array)
        assert mine.shape == ref.shape and mine.dtype == ref.dtype
        np.testing.assert_allclose(np.asarray(mine), np.asarray(ref), rtol=RTOL, atol=ATOL)
        assert len(mine.addressable_shards) == len(ref.addressable_shards)
        for shard in mine.addressable_shards:
            assert shard.data.shape == mine.sharding.shard_shape(mine.shape)
            np.testing.assert_allclose(np.asarray(shard.data), np.asarray(mine)[shard.index])
    return ours


def test_elementwise(mesh):
    a, b = put(mesh, rand(16, 8), P("x", "y")), rand(16, 8, seed=1)
    out = check_like_jax(lambda a, b: jnp.sin(a) * b + 1, (a, b), None, P("x", "y"), mesh)
    assert out.sharding == NamedSharding(mesh, P("x", "y"))


def test_matmul_pinned_output(mesh):
    a, b = put(mesh, rand(16, 8), P("x", "y")), put(mesh, rand(8, 4), P("y"))
    out = check_like_jax(lambda a, b: a @ b, (a, b), None, P("x"), mesh)
    assert out.sharding.spec == P("x")


def test_reductions_unpinned(mesh):
    a = put(mesh, rand(16, 8), P("x", "y"))
    out = check_like_jax(lambda a: (a.sum(0), a.max(), jnp.mean(a, 1)), (a,), None, None, mesh)
    scalar = out[1]
    assert scalar.is_fully_replicated and isinstance(scalar.sharding, NamedSharding)


def test_reshape_and_transpose(mesh):
    a = put(mesh, rand(8, 4, 2), P("x"))
    check_like_jax(lambda a: (a.reshape(32, 2), a.transpose(2, 0, 1)), (a,), None, None, mesh)


def test_concatenate(mesh):
    a, b = put(mesh, rand(8, 4), P("x")), put(mesh, rand(8, 6), P("x"))
    check_like_jax(lambda a, b: jnp.concatenate([a, b], 1), (a, b), None, P("x"), mesh)


def test_gather_and_scatter(mesh):
    table = put(mesh, rand(16, 8), P(None, "y"))
    index = jnp.array([3, 1, 15, 0, 7, 7, 2, 9])
    check_like_jax(lambda t, i: jnp.take(t, i, axis=0), (table, index), None, None, mesh)
    updates = rand(8, 8, seed=3)
    check_like_jax(lambda t, i, u: t.at[i].add(u), (table, index, updates), None, None, mesh)


def test_scan(mesh):
    xs = put(mesh, rand(6, 8, 4), P(None, "x"))

    def cumulative(xs):
        return jax.lax.scan(lambda c, x: (c + x, c * 2), jnp.zeros((8, 4)), xs)

    check_like_jax(cumulative, (xs,), None, None, mesh)


def test_cond(mesh):
    a = put(mesh, rand(8, 4), P("x"))
    f = lambda a, p: jax.lax.cond(p > 0, lambda x: x * 2, lambda x: -x, a)  # noqa: E731
    check_like_jax(f, (a, 1), None, None, mesh)
    check_like_jax(f, (a, -1), None, None, mesh)


def test_with_sharding_constraint_inside(mesh):
    a = put(mesh, rand(16, 8), P("x"))

    def f(a):
        b = jax.lax.with_sharding_constraint(a * 3, NamedSharding(mesh, P(None, "y")))
        return b + 1

    check_like_jax(f, (a,), None, None, mesh)


def test_shard_map_inside(mesh):
    a = put(mesh, rand(16, 4), P("x"))

    def f(a):
        local = lambda b: jax.lax.psum(b.sum(0), "x")  # noqa: E731
        return jax.shard_map(local, mesh=mesh, in_specs=P("x"), out_specs=P())(a)

    check_like_jax(f, (a,), None, None, mesh)


def test_pytrees_in_and_out(mesh):
    params = {"w": put(mesh, rand(8, 4), P(None, "y")), "b": rand(4, seed=2)}
    x = put(mesh, rand(16, 8), P("x"))

    def f(params, x):
        y = x @ params["w"] + params["b"]
        return {"y": y, "stats": (y.mean(), y.std())}

    out = check_like_jax(f, (params, x), ({"w": P(None, "y"), "b": P()}, P("x")),
                         {"y": P("x", "y"), "stats": (P(), P())}, mesh)
    assert out["y"].sharding.spec == P("x", "y")


def test_value_and_grad_train_step(mesh):
    w = put(mesh, rand(8, 4), P(None, "y"))
    x = put(mesh, rand(16, 8), P("x"))

    def step(w, x):
        loss, grad = jax.value_and_grad(lambda w: jnp.mean((x @ w) ** 2))(w)
        return w - 0.1 * grad, loss

    check_like_jax(step, (w, x), None, None, mesh)


def test_prng_keys_in_and_out(mesh):
    keys = jax.random.split(jax.random.key(0), 8)
    sharding = NamedSharding(mesh, P(("x", "y")))
    keys = jax.device_put(keys, sharding)
    f = lambda k: (jax.random.split(k[0], 8), jax.vmap(jax.random.uniform)(k))  # noqa: E731
    ours = block(jit(f, sharding, (sharding, None))(keys))
    theirs = block(jax.jit(f, in_shardings=sharding, out_shardings=(sharding, None))(keys))
    assert jax.dtypes.issubdtype(ours[0].dtype, jax.dtypes.prng_key)
    np.testing.assert_array_equal(jax.random.key_data(ours[0]), jax.random.key_data(theirs[0]))
    np.testing.assert_array_equal(np.asarray(ours[1]), np.asarray(theirs[1]))
    assert ours[0].sharding.spec == P(("x", "y"))


class _FooRules:
    """A float32 in an extended dtype of its own (jax's ``EArray``), not a PRNG key."""
    allow_conversion = True

    @staticmethod
    def physical_element_aval(dtype):
        return core.ShapedArray((), jnp.float32)

    @staticmethod
    def global_sharded_result_handler(aval, sharding, committed):
        physical = pxla.global_result_handlers[core.ShapedArray](
            core.physical_aval(aval), sharding, committed)
        return physical.wrap(lambda data: earray.EArray(aval, data))


class _foo(dtypes.extended):
    pass


@dataclasses.dataclass(frozen=True)
class _FooDType(dtypes.ExtendedDType):
    name: str = "foo"
    _rules: type = _FooRules
    type: type = _foo


def test_an_extended_dtype_other_than_keys_in_and_out():
    make = lambda x: jax.lax.convert_element_type(x, _FooDType())  # noqa: E731
    twice = lambda e: (e, jax.lax.convert_element_type(e, jnp.float32) * 2)  # noqa: E731
    data = jnp.arange(3, dtype=jnp.float32)
    ours, theirs = jit(make)(data), jax.jit(make)(data)
    assert type(ours) is type(theirs) and ours.dtype == theirs.dtype == _FooDType()
    (same, doubled), (jax_same, jax_doubled) = jit(twice)(ours), jax.jit(twice)(theirs)
    assert same.dtype == jax_same.dtype == _FooDType()
    np.testing.assert_array_equal(np.asarray(same._data), np.asarray(jax_same._data))
    np.testing.assert_array_equal(np.asarray(doubled), np.asarray(jax_doubled))


def test_donation_deletes_the_input(mesh):
    a = put(mesh, rand(16, 8), P("x", "y"))
    expected = np.asarray(a) * 2
    j = jit(lambda a: a * 2, P("x", "y"), P("x", "y"), mesh=mesh, donate_argnums=0)
    out = block(j(a))
    np.testing.assert_allclose(np.asarray(out), expected)
    assert a.is_deleted()
    assert j.lower(out).compile().memory_analysis().alias_size_in_bytes > 0
    with pytest.raises(RuntimeError, match=r"Array has been deleted with shape=float32\[16,8\]\. "
                                           r"args\[0\].*donated"):
        j(a)


def test_arguments_pass_through_or_are_placed_and_counted(mesh):
    a = put(mesh, rand(16, 8), P("x", "y"))
    compiled = jit(lambda a: a + 1, P("x", "y"), mesh=mesh).lower(a).compile()
    block(compiled(a))
    assert (compiled.placement.resharded, compiled.placement.placed) == (0, 0)
    block(compiled(np.asarray(a)))
    block(compiled(jnp.asarray(np.asarray(a))))  # uncommitted
    assert compiled.placement.placed == 2
    # Equivalent shardings pass through: P("x", "y", ) and P(("x",), "y") tile alike.
    block(compiled(put(mesh, np.asarray(a), P(("x",), "y"))))
    assert (compiled.placement.resharded, compiled.placement.placed) == (0, 2)


def test_repeated_compiled_calls_run_in_jax_dispatch(mesh, monkeypatch):
    """As jax's compiled calls: one signature goes through Python once, then runs in
    jax's C++ dispatch, donating calls too (their donated arrays deleted after it);
    static arguments passed again stay in Python."""
    from shardc.runtime.compiled import Compiled

    calls = []
    python_call = Compiled._call
    monkeypatch.setattr(Compiled, "_call",
                        lambda self, *a: calls.append(self) or python_call(self, *a))
    a = put(mesh, rand(16, 8), P("x", "y"))
    compiled = jit(lambda a: a + 1, P("x", "y"), mesh=mesh).lower(a).compile()
    expected = np.asarray(a) + 1
    for _ in range(3):
        np.testing.assert_array_equal(np.asarray(block(compiled(a))), expected)
    assert len(calls) == 1
    block(compiled(np.asarray(a)))  # another signature: host data
    assert len(calls) == 2

    calls.clear()
    scaled = jit(lambda a, k: a * k, P("x", "y"), static_argnums=1, mesh=mesh)
    compiled = scaled.lower(a, 3).compile()
    for _ in range(2):
        np.testing.assert_array_equal(np.asarray(block(compiled(a, 3))), np.asarray(a) * 3)
        np.testing.assert_array_equal(np.asarray(block(compiled(a))), np.asarray(a) * 3)
    assert len(calls) == 3  # every call passing the static again, and one without

    calls.clear()
    donating = jit(lambda a: a + 1, P("x", "y"), donate_argnums=0, mesh=mesh)
    compiled = donating.lower(a).compile()
    for _ in range(3):
        donated = put(mesh, np.asarray(a), P("x", "y"))
        np.testing.assert_array_equal(np.asarray(block(compiled(donated))), expected)
        assert donated.is_deleted()
    assert len(calls) == 1


def test_committed_argument_of_another_sharding_is_jax_error(mesh):
    # jax.jit never moves committed data on a call; it says which argument differs.
    a = put(mesh, rand(16, 8), P("x", "y"))
    other = put(mesh, np.asarray(a), P("y"))
    theirs = jax.jit(lambda a: a + 1, in_shardings=NamedSharding(mesh, P("x", "y")))
    with pytest.raises(ValueError, match="Computation was compiled for input shardings") as e:
        theirs.lower(a).compile()(other)
    compiled = jit(lambda a: a + 1, P("x", "y"), mesh=mesh).lower(a).compile()
    with pytest.raises(ArgumentShardingError, match=r"Computation was compiled for input "
                                                    r"shardings that disagree with the shardings "
                                                    r"of arguments passed to it. Here are the 1 "
                                                    r"mismatches:\nArgument a with shape "
                                                    r"float32\[16,8\]:\n  Passed sharding: "
                                                    r".*spec=P\('y',\)[\s\S]*\(args\[0\]\)"):
        compiled(other)
    assert issubclass(ArgumentShardingError, type(e.value))
    with pytest.raises(ValueError, match="Sharding passed to jit does not match") as e:
        jax.jit(lambda a: a + 1, in_shardings=NamedSharding(mesh, P("x", "y")))(other)
    with pytest.raises(ArgumentShardingError, match=r"Sharding passed to jit does not match the "
                                                    r"sharding on the respective arg[\s\S]*args\[0\]"):
        jit(lambda a: a + 1, P("x", "y"), mesh=mesh)(other)


def test_scalars_keep_their_weak_type(mesh):
    a = put(mesh, jnp.ones(8, jnp.bfloat16), P("x"))
    out = block(jit(lambda a, s: a * s, mesh=mesh)(a, 3.0))
    assert out.dtype == jnp.bfloat16
    np.testing.assert_allclose(np.asarray(out, np.float32), 3.0)


def test_compiled_reports_shardings_text_costs_and_collectives(mesh):
    a, b = put(mesh, rand(16, 8), P("x", "y")), put(mesh, rand(8, 4), P("y"))
    compiled = jit(lambda a, b: (jnp.tanh(a @ b), (a * 2).sum(0)), out_shardings=(P("x"), None),
                   mesh=mesh).lower(a, b).compile()
    (in_a, in_b), _ = compiled.input_shardings
    assert in_a.spec == P("x", "y") and in_b.spec == P("y")
    out0, out1 = compiled.output_shardings
    assert out0 == NamedSharding(mesh, P("x")) and isinstance(out1, NamedSharding)
    assert "_spmd" in compiled.as_text()
    assert compiled.collectives()["all-reduce"].count == 2
    assert compiled.collectives()["all-reduce"].bytes_per_device > 0
    assert compiled.cost_analysis()["flops"] > 0
    assert compiled.memory_analysis().argument_size_in_bytes == (4 * 4 + 4 * 4) * 4


def test_non_iota_device_order(mesh):
    devices = np.array(jax.devices()[::-1]).reshape(4, 2)
    backwards = Mesh(devices, ("x", "y"), axis_types=(AUTO, AUTO))
    a = put(backwards, rand(16, 8), P("x", "y"))
    out = check_like_jax(lambda a: a.T + jnp.arange(16.0), (a,), None, P("y", "x"), backwards)
    assert out.sharding.mesh.devices.tolist() == devices.tolist()


def test_abstract_mesh_one_lowering_two_compiles():
    abstract = AbstractMesh((4,), ("d",), axis_types=(AUTO,))
    j = jit(lambda a: a * 2 + 1, NamedSharding(abstract, P("d")), NamedSharding(abstract, P("d")))
    devices = jax.devices()
    for subset in (devices[:4], devices[4:]):
        mesh = Mesh(np.array(subset), ("d",), axis_types=(AUTO,))
        a = put(mesh, np.arange(8.0, dtype=np.float32), P("d"))
        out = block(j(a))
        np.testing.assert_allclose(np.asarray(out), np.arange(8.0) * 2 + 1)
        assert out.sharding.device_set == set(subset)
    info = j.cache_info()
    assert (info.misses, info.hits, info.compiled) == (1, 1, 2)


def test_static_arguments_at_call_time(mesh):
    j = jit(lambda a, n: a * n, static_argnums=1, mesh=mesh)
    a = put(mesh, rand(8), P("x"))
    np.testing.assert_allclose(np.asarray(block(j(a, 3))), np.asarray(a) * 3, rtol=1e-6)
    compiled = j.lower(a, 3).compile()
    np.testing.assert_allclose(np.asarray(block(compiled(a, 3))), np.asarray(a) * 3, rtol=1e-6)
    np.testing.assert_allclose(np.asarray(block(compiled(a))), np.asarray(a) * 3, rtol=1e-6)
    with pytest.raises(InvalidArgumentError, match="static argument 1 is 4"):
        compiled(a, 4)


def test_no_mesh_runs_on_one_device():
    out = block(jit(lambda a: a + 1)(np.ones(4, np.float32)))
    np.testing.assert_allclose(np.asarray(out), 2.0)
    assert len(out.sharding.device_set) == 1


# -- bad inputs ---------------------------------------------------------------


@pytest.fixture(scope="module")
def compiled_add(mesh):
    return jit(lambda a, b: a + b, (P("x"), P("x")), mesh=mesh).lower(
        jax.ShapeDtypeStruct((8,), jnp.float32), jax.ShapeDtypeStruct((8,), jnp.float32)
    ).compile()


def test_argument_on_other_devices(compiled_add):
    other = Mesh(np.array(jax.devices()[:4]), ("x",))
    a = jax.device_put(jnp.ones(8), NamedSharding(other, P("x")))
    with pytest.raises(DeviceMismatchError, match=r"args\[1\] is committed to devices \[0, 1, 2, 3\]"):
        compiled_add(jnp.ones(8), a)


def test_argument_of_wrong_shape_or_dtype(compiled_add):
    # jax's words first (every mismatch, by parameter name), the pytree path after.
    with pytest.raises(InvalidArgumentError, match=r"Argument types differ .*\nArgument 'a' "
                                                   r"compiled with float32\[8\] and called "
                                                   r"with float32\[9\] \(args\[0\]\)") as ours:
        compiled_add(np.ones(9, np.float32), np.ones(8, np.float32))
    theirs = jax.jit(lambda a, b: a + b).lower(np.ones(8, np.float32),
                                               np.ones(8, np.float32)).compile()
    with pytest.raises(TypeError) as info:
        theirs(np.ones(9, np.float32), np.ones(8, np.float32))
    assert str(ours.value).startswith(str(info.value).splitlines()[0])
    with pytest.raises(InvalidArgumentError, match=r"called with int32\[8\] \(args\[1\]\)"):
        compiled_add(np.ones(8, np.float32), jnp.ones(8, jnp.int32))


@pytest.mark.parametrize("lowered_with, called_with", [
    (np.float32(1), 2), (np.int32(1), 2.0), (np.float32(1), True), (True, 1),
    (np.complex64(1), 1.0), (np.ones(3, np.float32), np.arange(3))])
def test_argument_of_another_type_than_compiled_named_as_jax_names_it(lowered_with, called_with):
    # A Python scalar has the type jax gives it (2: int32[]), host data its canonical
    # type (int64 data: int32[3]); either is refused where the program was compiled
    # for another, with jax's words.
    errors = []
    for wrap in (jax.jit, jit):
        compiled = wrap(lambda x: x * 2).lower(lowered_with).compile()
        with pytest.raises(TypeError) as info:
            compiled(called_with)
        errors.append(str(info.value).splitlines())
    theirs, ours = errors
    assert ours[0] == theirs[0] and ours[1].startswith(theirs[1])


@pytest.mark.parametrize("lowered_with, called_with", [(1, 2), (1.0, 3.0), (1, np.int32(3)),
                                                       (True, False)])
def test_python_scalar_of_the_compiled_type_runs_as_with_jax(lowered_with, called_with):
    outs = [wrap(lambda x: x * 2).lower(lowered_with).compile()(called_with)
            for wrap in (jax.jit, jit)]
    assert outs[1].dtype == outs[0].dtype and outs[1].weak_type == outs[0].weak_type
    np.testing.assert_array_equal(outs[1], outs[0])


def test_host_data_of_a_64_bit_type_runs_as_its_canonical_type(compiled_add):
    # With x64 off, jax runs float64 numpy data as float32 (and int64 as int32).
    out = compiled_add(np.ones(8, np.float64), np.arange(8, dtype=np.float64))
    np.testing.assert_array_equal(np.asarray(out), 1 + np.arange(8, dtype=np.float32))
    f = jit(lambda x: x * 2)
    placed = f(jnp.arange(8))  # int32, then the same values from numpy's int64
    np.testing.assert_array_equal(np.asarray(f(np.arange(8))), np.asarray(placed))


def test_abstract_or_unsupported_arguments(compiled_add):
    with pytest.raises(InvalidArgumentError, match="ShapeDtypeStruct"):
        compiled_add(jax.ShapeDtypeStruct((8,), jnp.float32), np.ones(8, np.float32))
    tree = {"a": np.ones((4, 2), np.int32),
            "b": {"c": jax.ShapeDtypeStruct((4, 2), np.int32)}}
    with pytest.raises(TypeError, match="is not a valid JAX type") as theirs:
        jax.jit(lambda x: x)(tree)
    with pytest.raises(InvalidArgumentError, match=r"Argument 'x\['b'\]\['c'\]' of shape "
                                                   r"int32\[4,2\] of type.*ShapeDtypeStruct.*"
                                                   r"is not a valid JAX type"):
        jit(lambda x: x)(tree)
    assert issubclass(InvalidArgumentError, type(theirs.value))
    with pytest.raises(InvalidArgumentError, match=r"args\[0\]: cannot pass a str"):
        compiled_add("no", np.ones(8, np.float32))


def test_string_array_argument_is_no_jax_type():
    # A string array is a jax.Array (on CPU) that jit refuses before compiling.
    strings = jax.device_put(np.array(["abcd", "efgh"], dtype=np.dtypes.StringDType()),
                             device=jax.devices("cpu")[0])
    with pytest.raises(TypeError) as theirs:
        jax.jit(lambda x: x)(strings)
    with pytest.raises(TypeError) as ours:
        jit(lambda x: x)(strings)
    assert str(ours.value) == str(theirs.value)
    assert "is not a valid JAX type" in str(ours.value)


def test_wrong_pytree(compiled_add):
    with pytest.raises(PytreeMismatchError, match="Function compiled with input pytree does not match"):
        compiled_add((np.ones(8, np.float32),), np.ones(8, np.float32))
    with pytest.raises(PytreeMismatchError):
        compiled_add(np.ones(8, np.float32))


def test_host_callbacks_run(tmp_path):
    # In a subprocess: a callback compiled without its host_callbacks kills the
    # process (SIGSEGV) instead of raising, and must not take pytest down with it.
    import subprocess
    import sys
    import textwrap

    script = textwrap.dedent(
        """
        import os
        os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=8"
        import jax, jax.numpy as jnp, numpy as np
        from jax.sharding import PartitionSpec as P
        from shardc.compiler import jit
        mesh = jax.make_mesh((8,), ("d",), axis_types=(jax.sharding.AxisType.Auto,))
        def f(a):
            jax.debug.print("total={t}", t=a.sum())
            return jax.pure_callback(np.sin, jax.ShapeDtypeStruct(a.shape, a.dtype), a) + 1
        out = jit(f, P("d"), mesh=mesh)(np.arange(8.0, dtype=np.float32))
        print("out", np.asarray(out, np.float64).round(3).tolist())
        """
    )
    run = subprocess.run([sys.executable, "-P", "-c", script], capture_output=True, text=True,
                         timeout=120)
    assert run.returncode == 0, run.stderr
    assert "total=28.0" in run.stdout
    assert f"out {(np.sin(np.arange(8.0)) + 1).round(3).tolist()}" in run.stdout


def test_user_argument_handler(mesh):
    from shardc.runtime import register_argument_handler
    from shardc.runtime.arguments import place

    class Celsius:
        def __init__(self, values):
            self.values = np.asarray(values, np.float32)

    def celsius_to_array(value, expected, counts):
        return place(value.values + 273.15, expected, counts)

    register_argument_handler(Celsius, celsius_to_array)
    compiled = jit(lambda k: k * 2, P("x"), mesh=mesh).lower(
        jax.ShapeDtypeStruct((8,), jnp.float32)).compile()
    out = block(compiled(Celsius(np.zeros(8))))
    np.testing.assert_allclose(np.asarray(out), 546.3, rtol=1e-6)


def test_float0_outputs_like_jax(mesh):
    def grads(x, n):
        return jax.grad(lambda x, n: (x * n).sum(), argnums=(0, 1), allow_int=True)(x, n)

    x, n = put(mesh, jnp.ones(8), P("x")), jnp.arange(8)
    ours = block(jit(grads, mesh=mesh)(x, n))
    theirs = jax.jit(grads)(x, n)
    assert ours[1].dtype == theirs[1].dtype == jax.dtypes.float0
    assert ours[1].shape == (8,)
    np.testing.assert_array_equal(np.asarray(ours[0]), np.arange(8.0))


def test_static_arguments_by_keyword(mesh):
    a = put(mesh, rand(8), P("x"))
    j = jit(lambda x, n: x * n, static_argnames="n", mesh=mesh)
    np.testing.assert_allclose(np.asarray(block(j(a, n=2))), np.asarray(a) * 2, rtol=1e-6)
    compiled = j.lower(a, n=3).compile()
    np.testing.assert_allclose(np.asarray(block(compiled(a, n=3))), np.asarray(a) * 3, rtol=1e-6)
    np.testing.assert_allclose(np.asarray(block(compiled(a))), np.asarray(a) * 3, rtol=1e-6)
    with pytest.raises(InvalidArgumentError, match="static argument 'n' is 4"):
        compiled(a, n=4)


def test_propagated_scan_and_constraints_compile(mesh):
    # Regression: after shardc's propagation XLA crashed on a while op carrying
    # sdy.sharding ("7 leaf nodes while this sharding has 11") and rejected
    # sdy.reshard ("unknown mesh"); module_for_xla rewrites both.
    from shardc.dialects.xla_form import module_for_xla

    xs = put(mesh, rand(6, 8, 4), P(None, "x"))

    def f(xs):
        carry, ys = jax.lax.scan(lambda c, x: (c + x, c * 2), jnp.zeros((8, 4)), xs)
        return jax.lax.with_sharding_constraint(ys, NamedSharding(mesh, P(None, "x", "y"))), carry

    lowered = jit(f, mesh=mesh).lower(xs)
    # The lowering keeps the user's constraint, as jax.jit's does.
    assert "sdy.sharding_constraint" in lowered.as_text() and "stablehlo.while" in lowered.as_text()
    check_like_jax(f, (xs,), None, None, mesh)
    with lowered.module.context:
        exported = ir.Module.parse(lowered.as_text().replace("sdy.sharding_constraint",
                                                             "sdy.reshard"))
    for_xla = str(module_for_xla(exported))
    assert "sdy.reshard" not in for_xla and 'sdy.sharding_constraint' in for_xla
    assert "sdy.reshard" in str(exported)  # the caller's module is untouched


def test_case_whose_branches_return_different_shardings(mesh):
    # Regression: a cond branch ending in a sharding constraint returned a value
    # sharded otherwise than the other branch's; without the case's own sharding
    # XLA's verifier rejected the module ("Inconsistent conditional sharding").
    a = put(mesh, rand(2, 4, 2), P(None, "x"))

    def f(a):
        return jax.lax.cond(jnp.sum(a) > 0.375, jnp.tanh,
                            lambda v: jax.lax.with_sharding_constraint(v, NamedSharding(mesh, P())),
                            a)

    ours = check_like_jax(f, (a,), None, None, mesh)
    assert ours.sharding.is_equivalent_to(jax.jit(f)(a).sharding, 3)


def test_dead_code_does_not_steer_propagation():
    # Regression: shardc lowered equations nothing uses (jax's lowering drops
    # them), and their shardings reached live values through propagation.
    mesh = jax.make_mesh((2, 4), ("x", "y"), axis_types=(jax.sharding.AxisType.Auto,) * 2)
    a = put(mesh, rand(2, 6), P())

    def f(a):
        b = jnp.tanh(a)
        jax.shard_map(lambda v: v, mesh=mesh, in_specs=P(None, "x"), out_specs=P(None, "x"))(b)
        return jnp.abs(b)

    ours = check_like_jax(f, (a,), None, None, mesh)
    assert ours.sharding.is_equivalent_to(jax.jit(f)(a).sharding, 2)
    assert "manual_computation" not in jit(f, mesh=mesh).lower(a).as_text()


def test_grad_of_an_unrolled_scan_compiles():
    # Regression: with unroll=2 jax reshapes the loop's stacked residuals there and
    # back; XLA folded that pair and moved the outer reshape's sharding onto the
    # loop ("Number of tile assignment dimensions ... different than the input rank").
    mesh = jax.make_mesh((8,), ("a",), axis_types=(jax.sharding.AxisType.Auto,))

    def grad_w(w, x):
        def loss(w):
            h, _ = jax.lax.scan(lambda h, _: (jnp.tanh(h @ w), None), x, length=4, unroll=2)
            return jnp.sum(h)
        return jax.grad(loss)(w)

    w = put(mesh, rand(8, 8) * 0.1, P("a"))
    x = put(mesh, rand(8, 8), P())
    check_like_jax(grad_w, (w, x), (P("a"), P()), None, mesh)


def test_loop_invariant_carries_are_hoisted_for_xla(mesh):
    # XLA hoists carries a loop body returns unchanged without shortening the
    # loop's sharding; module_for_xla hoists them first, and says the remaining
    # carries' shardings with constraints, not on the loop (test_xla_form.py).
    from shardc.dialects.xla_form import module_for_xla

    w = put(mesh, rand(8, 8), P("x"))
    xs = put(mesh, rand(3, 8, 8), P(None, "y"))

    def f(w, xs):
        return jax.lax.scan(lambda h, x: (jnp.tanh(h @ w + x), None), xs[0], xs)[0]

    lowered = jit(f, mesh=mesh).lower(w, xs)
    for_xla = str(module_for_xla(lowered.module))
    loop = next(line for line in for_xla.splitlines() if "stablehlo.while" in line)
    assert "%arg0" not in loop  # w is read from above, not carried
    assert "sdy.sharding" not in loop
    check_like_jax(f, (w, xs), None, None, mesh)


def test_reshape_round_trips_of_arguments_and_loop_values(mesh):
    # module_for_xla folds reshape(reshape(x)) back to x, for x of any kind (a
    # function argument has no op to read a sharding from).
    a = put(mesh, rand(8, 4), P("x"))

    def f(a):
        b = a.reshape(32).reshape(8, 4)
        c = jax.lax.fori_loop(0, 2, lambda i, v: jnp.tanh(v.reshape(32).reshape(8, 4)), a)
        return b * 2, c.reshape(4, 8).reshape(8, 4) + 1

    check_like_jax(f, (a,), None, None, mesh)


def test_approx_top_k_keeps_its_sharding_as_constraints(mesh):
    # XLA's conversion rejects a sharding on the ApproxTopK custom call ("mhlo.sharding
    # is not a supported attribute for ApproxTopK"): module_for_xla moves it onto
    # constraints of the call's results.
    a = put(mesh, rand(8, 8, 16), P("x", "y"))

    def f(a):
        values, indices = jax.lax.approx_max_k(a * 2.0, 3)
        return values + 1.0, indices

    check_like_jax(f, (a,), None, None, mesh)


def test_input_sharding_no_partition_spec_can_say():
    # Regression: an unplaced argument whose uses ask for more shards than it has
    # elements gets a sub-axis sharding from XLA, which no PartitionSpec on the
    # mesh expresses; reading it back failed (IndivisibleError, KeyError).
    for shape, axes in (((8,), ("x",)), ((2, 4), ("x", "y"))):
        mesh = jax.make_mesh(shape, axes, axis_types=(jax.sharding.AxisType.Auto,) * len(axes))

        def f(a):
            return jax.lax.with_sharding_constraint(a, NamedSharding(mesh, P(axes[-1])))

        x = np.arange(2, dtype=np.float32)
        compiled = jit(f, mesh=mesh).lower(x).compile()
        (in_sharding,), _ = compiled.input_shardings
        assert in_sharding.shard_shape((2,)) == (1,)  # what XLA decided, said exactly
        np.testing.assert_array_equal(np.asarray(compiled(x)), x)


def test_result_shardings_are_the_ones_jax_jit_returns(mesh):
    # Equal as objects, not only equivalent: a result tiled like the first placed
    # argument gets that argument's sharding (its trailing Nones included).
    x = put(mesh, rand(8, 4, 4, 3), P(None, "y", "x", None))
    for f in (lambda a: a * 2, lambda a: a.sum(0), lambda a: a.reshape(8, 48),
              lambda a: (a, a.transpose(1, 0, 2, 3))):
        ours, theirs = jit(f)(x), jax.jit(f)(x)
        for a, b in zip(jax.tree.leaves(ours), jax.tree.leaves(theirs)):
            assert a.sharding == b.sharding, (a.sharding, b.sharding)


def test_committedness_of_results_follows_jax_jit():
    f = lambda a: a + 1  # noqa: E731
    uncommitted = jnp.ones(4)
    on_two = jax.device_put(jnp.ones(4), jax.devices()[2])
    for value in (uncommitted, on_two, np.ones(4, np.float32)):
        ours, theirs = jit(f)(value), jax.jit(f)(value)
        assert (ours.committed, ours.sharding) == (theirs.committed, theirs.sharding)


def test_repeated_calls_take_jax_cpp_dispatch(mesh):
    a = put(mesh, rand(16, 8), P("x", "y"))
    j = jit(lambda a: a * 2, P("x", "y"), mesh=mesh)
    slow_calls = []
    original = functools.partial(calling._missed, weakref.ref(j))  # what the dispatch calls back

    def counting(*args, **kwargs):
        slow_calls.append(1)
        return original(*args, **kwargs)

    j._dispatch = jax_private.cpp_dispatch("f", j.fun, counting, (), (), ("test",),
                                           jax_private.dispatch_cache())
    for _ in range(3):
        np.testing.assert_allclose(np.asarray(block(j(a))), np.asarray(a) * 2)
    assert len(slow_calls) == 1  # the first call; the others ran in C++
    block(j(put(mesh, rand(8, 8), P("x", "y"))))  # a new signature comes back once
    assert len(slow_calls) == 2


def test_jits_of_one_function_share_the_dispatch_as_jax_jits_do(mesh, monkeypatch):
    events = []
    monkeypatch.setattr(jax_private, "test_event", events.append)

    def f(a):
        return a * 2

    a = put(mesh, rand(16, 8), P("x", "y"))
    for _ in range(4):
        np.testing.assert_allclose(np.asarray(block(jit(f)(a))), np.asarray(a) * 2)
    assert events.count("jit_cpp_cache_miss") == 1  # a new jit object each time
    # Other options make other programs: nothing shared.
    block(jit(f, out_shardings=P("x"), mesh=mesh)(a))
    block(jit(f, propagation="cost-aware")(a))
    assert events.count("jit_cpp_cache_miss") == 3


def test_prng_key_arguments_take_jax_cpp_dispatch(mesh, monkeypatch):
    events = []
    monkeypatch.setattr(jax_private, "test_event", events.append)
    keys = jax.device_put(jax.random.split(jax.random.key(0), 8), NamedSharding(mesh, P("x")))

    def f(k):
        return jax.vmap(jax.random.split)(k), jax.vmap(jax.random.normal)(k)

    new_keys, normals = jax.jit(f)(keys)
    ours, compiled = jit(f), jit(f).lower(keys).compile()
    for _ in range(3):
        for got_keys, got_normals in (ours(keys), compiled(keys)):
            np.testing.assert_array_equal(jax.random.key_data(got_keys),
                                          jax.random.key_data(new_keys))
            np.testing.assert_array_equal(got_normals, normals)
            assert (got_keys.sharding, got_normals.sharding) == (new_keys.sharding,
                                                                 normals.sharding)
    # The first calls alone ran in Python (jit's and the compiled program's).
    assert (events.count("jit_cpp_cache_miss"), events.count("stages_compiled_call")) == (1, 1)


def test_compile_for_other_devices_than_the_shardings_is_jax_error():
    mesh = Mesh(np.array(jax.devices()[:2]), ("x",))
    x = jax.ShapeDtypeStruct((8, 2), jnp.float32, sharding=NamedSharding(mesh, P("x")))
    with pytest.raises(ValueError, match="device_assignment passed to `.compile` must "
                                         "match") as theirs:
        jax.jit(lambda a: a).lower(x).compile(device_assignment=(jax.devices()[0],))
    with pytest.raises(DeviceMismatchError, match="device_assignment passed to `.compile` "
                                                  "must match"):
        jit(lambda a: a).lower(x).compile(device_assignment=(jax.devices()[0],))
    assert issubclass(DeviceMismatchError, type(theirs.value))
