"""``shardc.compiler.jit(...).lower(...)``: annotations, pytrees, caching and errors."""

import functools
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import AbstractMesh, AxisType, Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from shardc.compiler import jit as shardc_jit

# These tests check what lowering writes; propagation has its own tests.
jit = functools.partial(shardc_jit, propagate=False)
from shardc.dialects.errors import (
    DeviceMismatchError,
    IndivisibleDimensionError,
    InvalidArgumentError,
    LoweringPlatformsError,
    MeshMismatchError,
    MissingMeshError,
    PlatformMismatchError,
    PytreeMismatchError,
    RankMismatchError,
    ShardcError,
    ShardingTreeError,
    UnknownAxisError,
)

AUTO = AxisType.Auto


def mesh_4x2():
    return jax.make_mesh((4, 2), ("x", "y"), axis_types=(AUTO, AUTO))


def mesh_8():
    return jax.make_mesh((8,), ("d",), axis_types=(AUTO,))


def arg_shardings(text):
    """The sdy.sharding of each @main argument, None where there is none."""
    signature = re.search(r"func\.func public @main\((.*?)\) ->", text).group(1)
    args = re.split(r", (?=%arg\d+:)", signature)
    return [
        (m.group(1) if (m := re.search(r"sdy\.sharding = (#sdy\.sharding<.*?\]>)", a)) else None)
        for a in args
    ]


def result_shardings(text):
    results = re.search(r"\) -> \((.*?)\) \{\n", text) or re.search(r"\) -> (.*?) \{\n", text)
    return re.findall(r"sdy\.sharding = (#sdy\.sharding<.*?\]>)", results.group(1))


def test_arrays_on_a_4x2_mesh():
    mesh = mesh_4x2()
    a = jax.device_put(jnp.ones((8, 4)), NamedSharding(mesh, P("x", "y")))
    b = jax.device_put(jnp.ones((4, 6)), NamedSharding(mesh, P("y")))
    text = jit(lambda a, b: a @ b, out_shardings=NamedSharding(mesh, P("x"))).lower(a, b).as_text()
    assert 'sdy.mesh @mesh = <["x"=4, "y"=2]>' in text
    assert arg_shardings(text) == [
        '#sdy.sharding<@mesh, [{"x"}, {"y"}]>',
        '#sdy.sharding<@mesh, [{"y"}, {}]>',
    ]
    assert result_shardings(text) == ['#sdy.sharding<@mesh, [{"x"}, {}]>']
    assert "mhlo.num_partitions = 8 : i32" in text
    assert "mhlo.num_replicas = 1 : i32" in text


def test_arrays_on_an_8_mesh():
    mesh = mesh_8()
    a = jax.device_put(jnp.arange(16.0), NamedSharding(mesh, P("d")))
    lowered = jit(lambda a: jnp.sin(a) * 2).lower(a)
    text = lowered.as_text()
    assert 'sdy.mesh @mesh = <["d"=8]>' in text
    assert arg_shardings(text) == ['#sdy.sharding<@mesh, [{"d"}]>']
    assert result_shardings(text) == []  # unspecified result: left to propagation
    assert lowered.mesh is mesh
    assert lowered.in_shardings == ((NamedSharding(mesh, P("d")),), {})
    assert lowered.out_shardings is None


def test_numpy_scalars_and_uncommitted_arrays_are_unspecified():
    mesh = mesh_8()
    s = NamedSharding(mesh, P("d"))
    args = (jnp.ones(8), np.ones(8, np.float32), 2.0, jnp.ones(8))
    texts = [jitted(lambda a, b, c, d: a * b + c + d, in_shardings=(s, None, None, None))
             .lower(*args).as_text() for jitted in (jit, jax.jit)]
    # Over several devices jax's lowering pins an unspecified scalar replicated.
    assert arg_shardings(texts[0]) == arg_shardings(texts[1]) == [
        '#sdy.sharding<@mesh, [{"d"}]>', None, "#sdy.sharding<@empty_mesh, []>", None]


def test_shape_dtype_structs_with_and_without_sharding():
    mesh = mesh_4x2()
    x = jax.ShapeDtypeStruct((8, 2), jnp.float32, sharding=NamedSharding(mesh, P(None, "y")))
    y = jax.ShapeDtypeStruct((8, 2), jnp.float32)
    text = jit(lambda x, y: x + y).lower(x, y).as_text()
    assert arg_shardings(text) == ['#sdy.sharding<@mesh, [{}, {"y"}]>', None]


def test_partition_specs_resolve_against_jit_mesh_and_context_mesh():
    mesh = mesh_4x2()
    x = jax.ShapeDtypeStruct((8, 2), jnp.float32)
    expected = ['#sdy.sharding<@mesh, [{"x"}, {}]>']
    assert arg_shardings(jit(lambda a: a, P("x"), mesh=mesh).lower(x).as_text()) == expected
    with jax.set_mesh(mesh):
        text = jit(lambda a: a, P("x"), P(None, "y")).lower(x).as_text()
    assert arg_shardings(text) == expected
    assert result_shardings(text) == ['#sdy.sharding<@mesh, [{}, {"y"}]>']


def test_partition_spec_without_any_mesh_is_a_clear_error():
    x = jax.ShapeDtypeStruct((8, 2), jnp.float32)
    with pytest.raises(RuntimeError, match="requires a non-empty mesh") as theirs:
        jax.jit(lambda a: a, in_shardings=P("x")).lower(x)
    with pytest.raises(MissingMeshError, match=r"jit requires a non-empty mesh in context.*"
                                               r"args\[0\].*needs a mesh"):
        jit(lambda a: a, P("x")).lower(x)
    assert issubclass(MissingMeshError, type(theirs.value))


def test_a_legacy_mesh_block_is_not_jits_context_mesh():
    # As jax.jit: `with mesh:` only serves pjit (shardc.compiler.pjit).
    x = jnp.arange(8.0)
    with pytest.warns(DeprecationWarning), mesh_8():
        with pytest.raises(RuntimeError, match="requires a non-empty mesh") as theirs:
            jax.jit(lambda a: a, in_shardings=P("d"))(x)
        with pytest.raises(MissingMeshError, match="requires a non-empty mesh"):
            jit(lambda a: a, P("d"))(x)
    assert issubclass(MissingMeshError, type(theirs.value))


def test_pytree_prefix_shardings_and_paths():
    mesh = mesh_4x2()
    params = {"w": jnp.ones((4, 8)), "b": jnp.ones((8,))}
    x = jnp.ones((16, 4))
    in_shardings = ({"w": P(None, "y"), "b": P("y")}, P("x"))
    out_shardings = {"out": P("x", "y"), "aux": (P(), None)}

    def f(params, x):
        y = x @ params["w"] + params["b"]
        return {"out": y, "aux": (y.sum(), x)}

    lowered = jit(f, in_shardings, out_shardings, mesh=mesh).lower(params, x)
    text = lowered.as_text()
    # Leaves in pytree order: dict keys sorted, so b before w.
    assert arg_shardings(text) == [
        '#sdy.sharding<@mesh, [{"y"}]>',
        '#sdy.sharding<@mesh, [{}, {"y"}]>',
        '#sdy.sharding<@mesh, [{"x"}, {}]>',
    ]
    assert result_shardings(text) == [
        "#sdy.sharding<@mesh, []>",
        '#sdy.sharding<@mesh, [{"x"}, {"y"}]>',
    ]
    assert lowered.out_shardings["aux"][1] is None
    assert lowered.out_shardings["out"].spec == P("x", "y")


def test_a_single_sharding_applies_to_a_whole_subtree():
    mesh = mesh_8()
    params = {"a": jnp.ones((8, 2)), "b": jnp.ones((16,))}
    text = jit(lambda p: p, NamedSharding(mesh, P("d"))).lower(params).as_text()
    assert arg_shardings(text) == ['#sdy.sharding<@mesh, [{"d"}, {}]>', '#sdy.sharding<@mesh, [{"d"}]>']


def test_sharding_tree_mismatch_names_both_structures():
    mesh = mesh_8()
    shardings = tuple(NamedSharding(mesh, P("d")) for _ in range(3))
    with pytest.raises(ValueError, match="in_shardings specification must be a tree prefix "
                                         "of the positional arguments") as theirs:
        jax.jit(lambda a, b: a, in_shardings=shardings)(jnp.ones(8), jnp.ones(8))
    with pytest.raises(ShardingTreeError, match=r"(?s)in_shardings specification must be a tree "
                                                r"prefix of the positional arguments.*"
                                                r"PyTreeDef\(\(\*, \*, \*\)\)"):
        jit(lambda a, b: a, (P("d"), P("d"), P("d")), mesh=mesh).lower(jnp.ones(8), jnp.ones(8))
    assert issubclass(ShardingTreeError, type(theirs.value))
    with pytest.raises(ShardingTreeError, match="out_shardings"):
        jit(lambda a: (a, a), out_shardings={"k": P("d")}, mesh=mesh).lower(jnp.ones(8))


def test_wrong_sharding_type_is_an_error():
    # Refused when jit() is called, with jax.jit's own error.
    with pytest.raises(TypeError, match="expected to be PartitionSpec instances or None, but got x"):
        jit(lambda a: a, "x")


def test_unsupported_argument_type_is_an_error():
    # jax.jit's TypeError, naming the argument by its path as jax does.
    wording = (r"Error interpreting argument to .* as an abstract array. The problematic value "
               r"is of type <class 'object'> and was passed to the function at path a\['k'\]")
    with pytest.raises(TypeError, match=wording):
        jax.jit(lambda a: a).lower({"k": object()})
    with pytest.raises(InvalidArgumentError, match=wording):
        jit(lambda a: a).lower({"k": object()})


def test_overflowing_argument_is_named_as_jax_names_it():
    # jax.jit's OverflowError names the argument by jax's own name for it (the
    # parameter's name and the path in it), made only when the error is raised.
    def add(x, y):
        return x + y

    with pytest.raises(OverflowError) as from_jax:
        jax.jit(add).lower(1.0, {"k": 2**70})
    with pytest.raises(OverflowError) as from_shardc:
        jit(add).lower(1.0, {"k": 2**70})
    assert "whose argument path is y['k']" in str(from_jax.value)
    assert str(from_shardc.value) == str(from_jax.value)


@pytest.mark.parametrize(
    "spec,shape,error,words",
    [
        (P("x"), (6, 4), IndivisibleDimensionError, ["args[1]", "dimension 0", "size 6", "by 4"]),
        (P(None, ("x", "y")), (4, 4), IndivisibleDimensionError, ["dimension 1", "by 8", "x=4 * y=2"]),
        (P("x", None, "y"), (8, 4), RankMismatchError, ["args[1]", "rank 2"]),
        (P("q"), (8, 4), UnknownAxisError, ["args[1]", "'q'"]),
    ],
)
def test_sharding_errors_name_the_argument(spec, shape, error, words):
    mesh = mesh_4x2()
    x = jax.ShapeDtypeStruct(shape, jnp.float32)
    with pytest.raises(error) as info:
        jit(lambda a, b: b, (None, spec), mesh=mesh).lower(jnp.ones(2), x)
    for word in words:
        assert word in str(info.value)


@pytest.mark.parametrize("place", ["b['k']", "a", "rest[0]", "a as a PartitionSpec"])
def test_a_sharding_of_too_high_a_rank_is_named_by_the_parameter_as_jax_names_it(place):
    """jax.jit names an argument by its parameter's name (``b['k']``, ``rest[0]``), not
    by its place (``args[1]['k']``), in "One of pjit arguments with pytree key path"."""
    mesh = mesh_4x2()
    bad = NamedSharding(mesh, P("x", None))
    args = (jnp.ones(8), {"k": jnp.ones(8)}, jnp.ones(8))
    in_shardings = {"b['k']": (None, {"k": bad}, None), "a": (bad, None, None),
                    "rest[0]": (None, None, bad),
                    "a as a PartitionSpec": (P("x", None), None, None)}[place]

    def f(a, b, *rest):
        return a

    with jax.set_mesh(mesh):
        with pytest.raises(ValueError) as from_jax:
            jax.jit(f, in_shardings=in_shardings).lower(*args)
        with pytest.raises(RankMismatchError) as from_shardc:
            jit(f, in_shardings=in_shardings).lower(*args)
    theirs = str(from_jax.value)
    assert f"with pytree key path {place.split()[0]} is" in theirs
    assert str(from_shardc.value).startswith(theirs + " (args[")


def test_duplicate_axis_is_refused_when_jit_is_called():
    # As jax.jit does, with its error: the spec alone is invalid, whatever the call.
    from jax._src.named_sharding import DuplicateSpecError

    with pytest.raises(DuplicateSpecError, match="duplicate entries for `x`"):
        jit(lambda a, b: b, (None, P("x", "x")), mesh=mesh_4x2())
    with pytest.raises(DuplicateSpecError, match="duplicate entries for `x`"):
        jax.jit(lambda a, b: b, in_shardings=(None, P("x", "x")))


def test_unconstrained_in_jit_shardings_is_refused_as_jax_does():
    for kind in ("in_shardings", "out_shardings"):
        with pytest.raises(ValueError, match=f"Unconstrained dims are not allowed when passed "
                                             f"to {kind}"):
            jit(lambda a: a, **{kind: P(P.UNCONSTRAINED)})


def test_indivisible_output_is_an_error():
    mesh = mesh_8()
    with pytest.raises(IndivisibleDimensionError, match=r"result\['o'\].*size 12"):
        jit(lambda a: {"o": a}, out_shardings={"o": P("d")}, mesh=mesh).lower(jnp.ones(12))


def test_device_mismatch_among_committed_arguments():
    devices = jax.devices()
    low = Mesh(np.array(devices[:4]), ("d",))
    high = Mesh(np.array(devices[4:]), ("d",))
    a = jax.device_put(jnp.ones(8), NamedSharding(low, P("d")))
    b = jax.device_put(jnp.ones(8), NamedSharding(high, P("d")))
    # jax's words: the arguments by name, with the function's name and their shapes.
    with pytest.raises(DeviceMismatchError, match=r"incompatible devices.*Got argument a of "
                                                  r"<lambda> with shape float32\[8\] and with "
                                                  r"device ids \[0, 1, 2, 3\].*argument b of "
                                                  r"<lambda>.*\[4, 5, 6, 7\]"):
        jit(lambda a, b: a + b).lower(a, b)
    single = jax.device_put(jnp.ones(8), devices[5])
    with pytest.raises(DeviceMismatchError):
        jit(lambda a, b: a + b).lower(a, single)


def test_errors_name_a_nested_function_as_jax_calls_do():
    # jax's call errors print the function itself (interpreting an argument) and
    # its __qualname__ (devices): a test's local function is told from others.
    def outer():
        def add(x, y):
            return x + y
        return add

    add = outer()
    a = jax.device_put(jnp.ones(2), jax.devices()[3])
    b = jax.device_put(jnp.ones(2), jax.devices()[2])
    for call, named in ((lambda f: f(a, b), "argument x of "
                         "test_errors_name_a_nested_function_as_jax_calls_do.<locals>.outer."
                         "<locals>.add with shape float32[2]"),
                        (lambda f: f(a, object()), f"Error interpreting argument to {add} as")):
        with pytest.raises((ValueError, TypeError)) as theirs:
            call(jax.jit(add))
        with pytest.raises(type(theirs.value)) as ours:
            call(jit(add))
        assert named in str(theirs.value)
        assert str(ours.value).startswith(str(theirs.value))


def test_committed_argument_off_the_context_mesh_is_jax_error():
    devices = jax.devices()
    small = Mesh(np.array(devices[:4]).reshape(2, 2), ("x", "y"))
    a = jax.device_put(jnp.ones((8, 2)), NamedSharding(small, P("x", "y")))
    f = lambda a: a  # noqa: E731
    with jax.set_mesh(mesh_4x2()):
        with pytest.raises(ValueError, match="Received incompatible devices") as theirs:
            jax.jit(f)(a)
        with pytest.raises(DeviceMismatchError) as ours:
            jit(f)(a)
    # jax's words (the argument first, by its qualified name), then shardc's advice.
    assert str(ours.value).startswith(str(theirs.value))
    assert ("Got argument a of test_committed_argument_off_the_context_mesh_is_jax_error."
            "<locals>.<lambda> with shape float32[8,2] and with device ids [0, 1, 2, 3] on "
            "platform CPU and jit's context mesh with device ids [0, 1, 2, 3, 4, 5, 6, 7]"
            in str(ours.value))
    with pytest.raises(DeviceMismatchError, match="context mesh"):
        jit(f, mesh=mesh_4x2())(a)
    assert issubclass(DeviceMismatchError, type(theirs.value))
    assert jit(f)(a).sharding == a.sharding  # no context mesh: computation follows data


def test_meshes_of_different_device_counts_are_an_error():
    m4 = AbstractMesh((4,), ("d",), axis_types=(AUTO,))
    m8 = AbstractMesh((8,), ("d",), axis_types=(AUTO,))
    x = jax.ShapeDtypeStruct((8,), jnp.float32)
    with pytest.raises(MeshMismatchError, match="device counts"):
        jit(lambda a, b: a + b, (NamedSharding(m4, P("d")), NamedSharding(m8, P("d")))).lower(x, x)


def test_two_mesh_shapes_of_one_device_count_get_two_symbols():
    x = jax.ShapeDtypeStruct((8, 8), jnp.float32)
    shardings = (NamedSharding(mesh_4x2(), P("x")), NamedSharding(mesh_8(), P("d")))
    text = jit(lambda a, b: a + b, shardings).lower(x, x).as_text()
    assert 'sdy.mesh @mesh = <["x"=4, "y"=2]>' in text
    assert 'sdy.mesh @mesh_0 = <["d"=8]>' in text
    assert arg_shardings(text)[1] == '#sdy.sharding<@mesh_0, [{"d"}, {}]>'


def test_one_spec_on_two_meshes_and_ranks_gets_a_sharding_for_each():
    # Annotation converts each (spec, mesh, type) once: none of them may be dropped.
    two_d = jax.ShapeDtypeStruct((8, 8), jnp.float32)
    one_d = jax.ShapeDtypeStruct((8,), jnp.float32)
    a, b = mesh_4x2(), jax.make_mesh((2, 4), ("x", "y"), axis_types=(AUTO, AUTO))
    shardings = tuple(NamedSharding(m, P("x")) for m in (a, a, b, a))
    text = jit(lambda *xs: xs, shardings).lower(two_d, one_d, two_d, two_d).as_text()
    assert arg_shardings(text) == [
        '#sdy.sharding<@mesh, [{"x"}, {}]>',
        '#sdy.sharding<@mesh, [{"x"}]>',
        '#sdy.sharding<@mesh_0, [{"x"}, {}]>',
        '#sdy.sharding<@mesh, [{"x"}, {}]>',
    ]


def test_body_sharding_constraint_refers_to_our_mesh():
    mesh = mesh_4x2()

    def f(a):
        return jax.lax.with_sharding_constraint(a * 2, NamedSharding(mesh.abstract_mesh, P("y")))

    text = jit(f, NamedSharding(mesh, P("x")), mesh=mesh).lower(jnp.ones((8, 4))).as_text()
    assert text.count("sdy.mesh @") == 1
    assert 'sdy.sharding_constraint %1 <@mesh, [{"y"}, {}]>' in text


def test_body_constraint_on_other_devices_is_jax_error():
    # As in jax.jit: the arguments' devices and a constraint's must agree.
    mesh = mesh_4x2()
    other_order = Mesh(np.array(jax.devices()[::-1]).reshape(4, 2), ("x", "y"), axis_types=(AUTO, AUTO))

    def f(a):
        return jax.lax.with_sharding_constraint(a * 2, NamedSharding(other_order, P("y")))

    with pytest.raises(ValueError, match="incompatible devices"):
        jax.jit(f, in_shardings=NamedSharding(mesh, P("x"))).lower(jnp.ones((8, 4)))
    with pytest.raises(ValueError, match="incompatible devices"):
        jit(f, NamedSharding(mesh, P("x")), mesh=mesh).lower(jnp.ones((8, 4)))


def test_body_mesh_is_adopted_when_the_signature_has_none():
    mesh = mesh_8()

    def f(a):
        return jax.lax.with_sharding_constraint(a + 1, NamedSharding(mesh, P("d")))

    lowered = jit(f).lower(jax.ShapeDtypeStruct((16,), jnp.float32))
    text = lowered.as_text()
    assert 'sdy.mesh @mesh = <["d"=8]>' in text
    assert "mhlo.num_partitions = 8" in text
    assert lowered.mesh.axis_names == ("d",)


def test_body_mesh_of_another_shape_over_the_same_devices_runs_as_jax_jit():
    def f(a):
        return jax.lax.with_sharding_constraint(a + 1, NamedSharding(mesh_8(), P("d")))

    lowered = jit(f, P("x"), mesh=mesh_4x2()).lower(jnp.ones((8,)))
    assert 'sdy.mesh @mesh = <["x"=4, "y"=2]>' in lowered.as_text()
    assert 'sdy.mesh @mesh_0 = <["d"=8]>' in lowered.as_text()
    x = jnp.arange(8.0)
    want = jax.jit(f, in_shardings=NamedSharding(mesh_4x2(), P("x")))(x)
    np.testing.assert_array_equal(shardc_jit(f, P("x"), mesh=mesh_4x2())(x), want)


def test_body_mesh_over_other_devices_is_an_error():
    two = jax.make_mesh((2,), ("d",), axis_types=(AUTO,), devices=jax.devices()[:2])

    def f(a):
        return jax.lax.with_sharding_constraint(a + 1, NamedSharding(two, P("d")))

    with pytest.raises(DeviceMismatchError, match="Received incompatible devices for jitted "
                       r"computation.*sharding_constraint inside jit with device ids \[0, 1\]"):
        jit(f, P("x"), mesh=mesh_4x2()).lower(jnp.ones((8,)))


def test_shard_map_body_uses_our_mesh_symbol():
    mesh = mesh_4x2()

    def f(a):
        return jax.shard_map(lambda b: jax.lax.psum(b, "x"), mesh=mesh, in_specs=P("x"), out_specs=P())(a)

    text = jit(f, P("x"), mesh=mesh).lower(jnp.ones((8, 2))).as_text()
    assert "sdy.manual_computation" in text
    assert text.count("sdy.mesh @") == 1
    assert re.search(r"in_shardings=\[<@mesh, \[\{\"x\"", text)


def test_donation_aliases_only_matching_shards():
    mesh = mesh_8()
    s = NamedSharding(mesh, P("d"))
    x = jax.ShapeDtypeStruct((16,), jnp.float32)
    same = jit(lambda a: a * 2, s, s, donate_argnums=0).lower(x).as_text()
    assert "tf.aliasing_output = 0 : i32" in same
    other = jit(lambda a: a * 2, s, NamedSharding(mesh, P()), donate_argnums=0).lower(x).as_text()
    assert "tf.aliasing_output" not in other and "jax.buffer_donor = true" in other
    open_out = jit(lambda a: a * 2, s, donate_argnums=0).lower(x).as_text()
    assert "jax.buffer_donor = true" in open_out


def test_static_arguments_and_keyword_arguments():
    mesh = mesh_8()
    calls = []

    def f(a, n, *, scale, mode):
        calls.append(n)
        return a * n * scale if mode == "mul" else a + n

    # Keyword arguments follow their data: with in_shardings jax.jit refuses them.
    j = jit(f, static_argnums=1, static_argnames="mode", mesh=mesh)
    x = jax.device_put(jnp.ones(8), NamedSharding(mesh, P("d")))
    text = j.lower(x, 3, scale=2.0, mode="mul").as_text()
    assert arg_shardings(text) == ['#sdy.sharding<@mesh, [{"d"}]>',
                                   "#sdy.sharding<@empty_mesh, []>"]
    j.lower(x, 3, scale=5.0, mode="mul")
    assert len(calls) == 1
    j.lower(x, 4, scale=5.0, mode="mul")
    j.lower(x, 4, scale=5.0, mode="add")
    assert len(calls) == 3
    assert j.cache_info().hits == 1 and j.cache_info().misses == 3


def test_unhashable_static_argument_is_an_error():
    # jax.jit's ValueError and wording, lowered or called.
    wording = "Non-hashable static arguments are not supported. An error occurred while trying"
    for jitted in (jax.jit, jit):
        with pytest.raises(ValueError, match=wording):
            jitted(lambda a, n: a, static_argnums=1).lower(jnp.ones(2), [1, 2])
        with pytest.raises(ValueError, match=wording):
            jitted(lambda a, n: a, static_argnames="n").lower(jnp.ones(2), n=[1, 2])
        with pytest.raises(ValueError, match=wording):
            jitted(lambda a, n: a, static_argnums=1)(jnp.ones(2), [1, 2])


def test_abstract_mesh_lowering_is_reused_for_other_devices():
    traces = []

    def f(a):
        traces.append(1)
        return a * 2

    abstract = AbstractMesh((4,), ("d",), axis_types=(AUTO,))
    j = jit(f, NamedSharding(abstract, P("d")), NamedSharding(abstract, P("d")))
    first = j.lower(jax.ShapeDtypeStruct((8,), jnp.float32))
    second = j.lower(jnp.ones(8))
    assert len(traces) == 1 and j.cache_info().hits == 1
    assert first.as_text() == second.as_text()
    assert "device_ids" not in first.as_text()


def test_two_device_sets_of_one_mesh_shape_share_the_lowering():
    traces = []

    def f(a):
        traces.append(1)
        return a + 1

    devices = jax.devices()
    low = Mesh(np.array(devices[:4]), ("d",), axis_types=(AUTO,))
    high = Mesh(np.array(devices[4:][::-1]), ("d",), axis_types=(AUTO,))
    j = jit(f)
    a = j.lower(jax.device_put(jnp.ones(8), NamedSharding(low, P("d"))))
    b = j.lower(jax.device_put(jnp.ones(8), NamedSharding(high, P("d"))))
    assert len(traces) == 1
    assert j.cache_info().hits == 1 and j.cache_info().misses == 1
    assert a.as_text() == b.as_text()
    assert a.mesh is low and b.mesh is high


def test_each_lowered_owns_its_module():
    j = jit(lambda a: a + 1, P("d"), mesh=mesh_8())
    first = j.lower(jnp.ones(8))
    first.module.operation.attributes["test.marker"] = first.module.operation.attributes[
        "mhlo.num_replicas"
    ]
    assert "test.marker" not in j.lower(jnp.ones(8)).as_text()


def test_a_cache_hit_prints_as_the_miss_did():
    # The miss hands its Lowered the module it propagated; hits parse the cached copy.
    j = shardc_jit(lambda a: jnp.sin(a) * 2, P("d"), mesh=mesh_8())
    x = jax.ShapeDtypeStruct((16, 4), jnp.float32)
    miss, hit = j.lower(x), j.lower(x)
    assert j.cache_info().hits == 1
    assert miss.as_text(debug_info=True) == hit.as_text(debug_info=True)
    assert miss.module is not hit.module


def test_debug_info_shows_source_locations():
    lowered = jit(lambda a: a + 1, P("d"), mesh=mesh_8()).lower(jnp.ones(8))
    assert "test_jit_lower.py" in lowered.as_text(debug_info=True)
    assert "compiler/api.py" not in lowered.as_text(debug_info=True)  # shardc's frames hidden
    assert "loc(" not in lowered.as_text()


def test_prng_key_shardings_cover_the_key_data_dimension():
    mesh = mesh_8()
    keys = jax.ShapeDtypeStruct((8,), jax.random.key(0).dtype)
    text = jit(lambda k: k, NamedSharding(mesh, P("d")), P("d"), mesh=mesh).lower(keys).as_text()
    assert "tensor<8x2xui32>" in text
    assert arg_shardings(text) == ['#sdy.sharding<@mesh, [{"d"}, {}]>']


def test_errors_are_shardc_errors():
    assert issubclass(IndivisibleDimensionError, ShardcError)
    assert issubclass(IndivisibleDimensionError, ValueError)
    assert issubclass(PytreeMismatchError, TypeError)


def test_lower_propagates_by_default():
    mesh = mesh_8()
    x = jax.ShapeDtypeStruct((16, 4), jnp.float32)
    lowered = shardc_jit(lambda a: jnp.sin(a) * 2, P("d"), mesh=mesh).lower(x)
    text = lowered.as_text(propagated=True)
    # The result and every intermediate get the propagated, closed sharding; the
    # plain text is jax.jit's, as lowered.
    assert "sharding_per_value" not in lowered.as_text()
    assert result_shardings(text) == ['#sdy.sharding<@mesh, [{"d"}, {}]>']
    assert 'stablehlo.sine %arg0 {sdy.sharding = #sdy.sharding_per_value<[<@mesh, [{"d"}, {}]>]>}' in text
    unpropagated = shardc_jit(lambda a: jnp.sin(a) * 2, P("d"), mesh=mesh).lower(x, propagate=False)
    assert "sharding_per_value" not in unpropagated.as_text()


def test_a_function_parameter_named_propagate_is_the_functions():
    def f(a, propagate):
        return a * propagate

    lowered = shardc_jit(f, mesh=mesh_8()).lower(jnp.ones(8), propagate=2.0)
    assert lowered.in_avals[1] == {"propagate": jax.core.ShapedArray((), jnp.float32,
                                                                      weak_type=True)}


def test_mesh_argument_is_the_context_mesh_while_tracing():
    # A bare PartitionSpec inside the function resolves against jit(mesh=...),
    # as it would under jax.set_mesh, for a constraint and for shard_map.
    mesh = mesh_4x2()

    def f(x):
        y = jax.lax.with_sharding_constraint(x * 2, P("x"))
        return jax.shard_map(lambda b: b + 1, in_specs=P("x", "y"), out_specs=P("x", "y"))(y)

    x = jnp.arange(64.0).reshape(8, 8)
    out = shardc_jit(f, mesh=mesh)(x)
    with jax.set_mesh(mesh):
        expected = jax.jit(f)(x)
    np.testing.assert_array_equal(out, expected)
    assert out.sharding.is_equivalent_to(expected.sharding, 2)
    abstract = shardc_jit(f, mesh=mesh.abstract_mesh).lower(x).as_text(propagated=True)
    assert '#sdy.sharding<@mesh, [{"x"}, {}]>' in abstract


def test_out_sharding_on_other_devices_is_jax_incompatible_devices_error():
    devices = jax.devices()
    low, high = Mesh(np.array(devices[:4]), ("x",)), Mesh(np.array(devices[4:]), ("x",))
    f = lambda a: a * 2  # noqa: E731
    with pytest.raises(ValueError, match="Received incompatible devices") as theirs:
        jax.jit(f, in_shardings=NamedSharding(low, P("x")),
                out_shardings=NamedSharding(high, P("x"))).lower(jnp.ones(8))
    with pytest.raises(DeviceMismatchError, match="Received incompatible devices for jitted "
                                                  r"computation. Got the sharding of args\[0\] "
                                                  r"with device ids \[0, 1, 2, 3\]"):
        jit(f, NamedSharding(low, P("x")), NamedSharding(high, P("x"))).lower(jnp.ones(8))
    assert issubclass(DeviceMismatchError, type(theirs.value))


def test_out_sharding_of_a_different_device_count_is_incompatible_before_tracing():
    m8, m4 = mesh_8(), jax.make_mesh((2, 2), ("x", "y"), axis_types=(AUTO, AUTO),
                                      devices=jax.devices()[:4])
    traced = []
    f = lambda a: traced.append(a) or a  # noqa: E731
    with pytest.raises(DeviceMismatchError, match="Received incompatible devices.*args\\[0\\]"
                                                  ".*out_shardings leaf 0"):
        jit(f, NamedSharding(m8, P("d")), NamedSharding(m4, P("x"))).lower(jnp.ones(8))
    assert not traced


def test_abstract_mesh_of_another_size_than_the_devices_is_jax_error():
    concrete = jax.ShapeDtypeStruct((8,), jnp.float32,
                                    sharding=NamedSharding(mesh_8(), P("d")))
    small = AbstractMesh((2,), ("d",), axis_types=(AUTO,))
    abstract = jax.ShapeDtypeStruct((8,), jnp.float32, sharding=NamedSharding(small, P("d")))
    g = lambda a, b: (a, b)  # noqa: E731
    with pytest.raises(ValueError, match="AbstractMesh size: 2 does not match the device "
                                         "assignment size: 8") as theirs:
        jax.jit(g).lower(abstract, concrete)
    with pytest.raises(MeshMismatchError, match=r"AbstractMesh size: 2 does not match the "
                                                r"device assignment size: 8 \(the sharding of "
                                                r"args\[0\] against the sharding of args\[1\]\)"):
        jit(g).lower(abstract, concrete)
    assert issubclass(MeshMismatchError, type(theirs.value))


def test_lower_and_compile_refuse_arguments_of_the_wrong_kind():
    # A string propagate was taken for True, and a string device_assignment of two
    # characters for two devices (a length error for others).
    abstract = AbstractMesh((2,), ("x",), axis_types=(AUTO,))
    x = jax.ShapeDtypeStruct((8, 2), jnp.float32, sharding=NamedSharding(abstract, P("x")))
    f = lambda x: x * 2  # noqa: E731
    with pytest.raises(TypeError, match="lower's propagate must be True or False, got 'no'"):
        jit(f).trace(x).lower(propagate="no")
    with pytest.raises(TypeError, match="lower's propagate must be True or False, got 'no'"):
        jit(f).lower(jnp.ones((8, 2)), propagate="no")
    lowered = jit(f).trace(x).lower(lowering_platforms=("cpu",))
    with pytest.raises(TypeError, match="device_assignment must be a tuple of jax devices, "
                                        "got 'ab'"):
        lowered.compile(device_assignment="ab")


def test_lowering_for_another_platform_on_an_abstract_mesh():
    abstract = AbstractMesh((2,), ("x",), axis_types=(AUTO,))
    x = jax.ShapeDtypeStruct((8, 2), jnp.float32, sharding=NamedSharding(abstract, P("x")))
    f = lambda x: x * 2  # noqa: E731
    theirs = jax.jit(f).trace(x).lower(lowering_platforms=("tpu",))
    lowered = jit(f).trace(x).lower(lowering_platforms=("tpu",))
    assert "num_partitions = 2" in theirs.as_text() and "num_partitions = 2" in lowered.as_text()
    with pytest.raises(RuntimeError, match="device_assignment cannot be `None`") as error:
        theirs.compile()
    with pytest.raises(PlatformMismatchError, match="device_assignment cannot be `None` during "
                                                    r"compilation.*\('tpu',\)"):
        lowered.compile()
    assert issubclass(PlatformMismatchError, type(error.value))
    # Given devices, it compiles for them whatever their platform, as jax's does.
    for stage in (theirs, lowered):
        compiled = stage.compile(device_assignment=tuple(jax.devices()[:2]))
        arr = jax.device_put(np.ones((8, 2), np.float32), NamedSharding(
            Mesh(np.array(jax.devices()[:2]), ("x",)), P("x")))
        np.testing.assert_array_equal(np.asarray(compiled(arr)), 2 * np.ones((8, 2)))
    with pytest.raises(ValueError, match="The size of abstract mesh 2.*must match the length "
                                         "of device assignment: 1") as error:
        theirs.compile(device_assignment=(jax.devices()[0],))
    with pytest.raises(DeviceMismatchError, match="The size of abstract mesh 2.*must match the "
                                                  "length of device assignment: 1"):
        lowered.compile(device_assignment=(jax.devices()[0],))
    assert issubclass(DeviceMismatchError, type(error.value))
    # Lowered for this machine's platform, the same trace compiles and runs.
    cpu = jit(f).trace(x).lower(lowering_platforms=("cpu",)).compile(
        device_assignment=tuple(jax.devices()[:2]))
    out = cpu(jax.device_put(jnp.ones((8, 2)), NamedSharding(
        Mesh(np.array(jax.devices()[:2]), ("x",)), P("x"))))
    np.testing.assert_array_equal(np.asarray(out), 2 * np.ones((8, 2)))


def test_abstract_argument_types_alone_need_lowering_platforms():
    # jax.jit's rule: arguments typed on an abstract mesh, with nothing that names
    # devices (host data does not), lower only for given platforms.
    abstract = AbstractMesh((2,), ("x",), axis_types=(AUTO,))
    x = jax.ShapeDtypeStruct((8, 2), jnp.float32, sharding=NamedSharding(abstract, P("x")))
    g = lambda a, b: (a, b)  # noqa: E731
    wording = r"Passing lowering_platforms.*is required when only AbstractMesh exists"
    with pytest.raises(ValueError, match=wording) as theirs:
        jax.jit(g).lower(x, np.arange(8))
    with pytest.raises(LoweringPlatformsError, match=wording):
        jit(g).lower(x, np.arange(8))
    assert issubclass(LoweringPlatformsError, type(theirs.value))
    for jitted in (jax.jit, jit):
        lowered = jitted(g).trace(x, np.arange(8)).lower(lowering_platforms=("tpu",))
        assert "num_partitions = 2" in lowered.as_text()
    # Devices from anywhere else decide: a committed argument, the context mesh.
    committed = jax.device_put(np.arange(8), NamedSharding(
        Mesh(np.array(jax.devices()[:2]), ("x",)), P()))
    for jitted in (jax.jit, jit):
        assert jitted(g).lower(x, committed).compile() is not None
    with jax.set_mesh(Mesh(np.array(jax.devices()[:2]), ("x",), axis_types=(AUTO,))):
        jit(g).lower(x, np.arange(8))
        jax.jit(g).lower(x, np.arange(8))


def test_stages_are_jax_stages():
    # Code written against jax.stages (isinstance checks, type annotations) takes
    # shardc's stages; what jax's would say, they say.
    mesh = mesh_4x2()
    f = lambda x, y: x @ y  # noqa: E731
    x = jnp.arange(64).reshape(8, 8)
    for jitted in (jax.jit, jit):
        j = jitted(f, in_shardings=NamedSharding(mesh, P(("x", "y"))),
                   out_shardings=NamedSharding(mesh, P(("x", "y"))))
        traced = j.trace(x, x + 1)
        lowered = traced.lower()
        compiled = lowered.compile()
        assert isinstance(traced, jax.stages.Traced)
        assert isinstance(lowered, jax.stages.Lowered)
        assert isinstance(compiled, jax.stages.Compiled)
        assert lowered.in_avals == compiled.in_avals
        assert lowered.in_tree == compiled.in_tree == jax.tree.flatten(((0, 0), {}))[1]
        assert not lowered._no_kwargs and not compiled._no_kwargs
        np.testing.assert_array_equal(np.asarray(compiled(x, x + 1)), np.asarray(x @ (x + 1)))


def test_set_mesh_devices_run_programs_that_name_none():
    # As jax.jit: under jax.set_mesh, unsharded programs run replicated on its devices,
    # and another set_mesh of the same shape on other devices is another program.
    devices = jax.devices()
    low, high = (Mesh(np.array(devices[:4]), ("x",)), Mesh(np.array(devices[4:]), ("x",)))
    f = shardc_jit(jnp.sin)
    x = np.arange(8.0, dtype=np.float32)
    for mesh in (low, high, low):
        with jax.set_mesh(mesh):
            ours, theirs = f(x), jax.jit(jnp.sin)(x)
        assert ours.sharding == theirs.sharding == NamedSharding(mesh, P())
        np.testing.assert_allclose(np.asarray(ours), np.asarray(theirs))
    assert f(x).sharding == jax.jit(jnp.sin)(x).sharding  # no context: one device
