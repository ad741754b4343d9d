"""Memory kinds in jit's shardings (``NamedSharding(..., memory_kind=...)``), compared
with jax.jit: values, the memories results come back in, compiled shardings."""

import jax
import numpy as np
import pytest
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P

from shardc.compiler import jit


@pytest.fixture
def mesh():
    return jax.make_mesh((2, 2), ("x", "y"), axis_types=(AxisType.Auto,) * 2)


def kinds(tree):
    return jax.tree.map(lambda s: s.memory_kind, tree)


@pytest.mark.parametrize("options", [
    {"in_shardings": "pinned_host"},
    {"in_shardings": "pinned_host", "out_shardings": "device"},
    {"out_shardings": ("pinned_host", "device")},
    {"out_shardings": ("unpinned_host", "pinned_host")},
], ids=lambda options: "-".join(f"{k}={v}" for k, v in options.items()))
def test_memory_kinds_as_jax_jit(mesh, options):
    x = np.arange(256, dtype=np.float32).reshape(16, 16)

    def on(kind):
        return NamedSharding(mesh, P("x", "y"), memory_kind=kind)

    given = {name: (tuple(map(on, kind)) if isinstance(kind, tuple) else on(kind))
             for name, kind in options.items()}
    arg = jax.device_put(x, given.get("in_shardings", on("device")))
    pair = isinstance(options.get("out_shardings"), tuple)

    def fun(v):
        return (v * 2, v + 1) if pair else v * 2

    ours, theirs = jit(fun, **given), jax.jit(fun, **given)
    out, expected = ours(arg), theirs(arg)
    for o, e in zip(jax.tree.leaves(out), jax.tree.leaves(expected)):
        np.testing.assert_array_equal(o, e)
        assert o.sharding == e.sharding
    compiled, reference = ours.lower(arg).compile(), theirs.lower(arg).compile()
    assert kinds(compiled.output_shardings) == kinds(reference.output_shardings)
    assert kinds(compiled.input_shardings) == kinds(reference.input_shardings)
    text = ours.lower(arg).as_text()
    assert 'mhlo.memory_kind = "pinned_host"' in text
    # Results are placed in their memories where their shardings are given.
    assert ("annotate_device_placement" in text) == ("out_shardings" in options)


def test_device_memory_only_leaves_the_module_as_jax_jit_does(mesh):
    sharding = NamedSharding(mesh, P("x"), memory_kind="device")
    text = jit(lambda v: v * 2, out_shardings=sharding).lower(np.ones((8, 4))).as_text()
    assert "memory_kind" not in text and "annotate_device_placement" not in text


def test_host_array_on_one_device_traced_with_its_memory_as_jax_jit():
    # jax's types carry the memory an array lives in whatever its sharding's class;
    # jax.export reads it from the lowering's argument and result types.
    host = jax.sharding.SingleDeviceSharding(jax.devices()[0], memory_kind="pinned_host")
    x = jax.device_put(np.arange(6, dtype=np.float32).reshape(2, 3), host)
    empty = jax.sharding.AbstractMesh((), ())
    expected = jax.export.export(jax.jit(lambda v: v), platforms=("tpu", "cuda"))(x)
    got = jax.export.export(jit(lambda v: v), platforms=("tpu", "cuda"))(x)
    assert got.in_avals[0].memory_space == expected.in_avals[0].memory_space \
        == jax.memory.Space.Host
    assert got.out_avals[0].memory_space == expected.out_avals[0].memory_space
    assert got.in_avals == expected.in_avals and got.out_avals == expected.out_avals
    assert got.in_shardings_jax(empty)[0] == expected.in_shardings_jax(empty)[0] \
        == NamedSharding(empty, P(None, None), memory_kind="pinned_host")
    assert jit(lambda v: v).trace(x).jaxpr.in_avals == jax.jit(lambda v: v).trace(x).jaxpr.in_avals
    np.testing.assert_array_equal(jit(lambda v: v * 2)(x), jax.jit(lambda v: v * 2)(x))


def on_one_device(kind):
    return jax.sharding.SingleDeviceSharding(jax.devices()[0], memory_kind=kind)


def assert_as_jax_jit(fun, *args):
    out, expected = jit(fun)(*args), jax.jit(fun)(*args)
    for o, e in zip(jax.tree.leaves(out), jax.tree.leaves(expected), strict=True):
        np.testing.assert_array_equal(o, e)
        assert o.sharding == e.sharding and o.sharding.memory_kind == e.sharding.memory_kind
        assert jax.typeof(o) == jax.typeof(e)
    return out, expected


@pytest.mark.parametrize("fun", [lambda v: v, lambda v: v * 2], ids=["identity", "double"])
def test_host_array_on_one_device_results_in_its_memory_as_jax_jit(fun):
    # With no sharding given, a result is in the memory its traced type says (the
    # argument's here), as jax.jit returns it; and it is passed on as it came back.
    x = jax.device_put(np.arange(8, dtype=np.float32), on_one_device("pinned_host"))
    out, _ = assert_as_jax_jit(fun, x)
    assert out.sharding.memory_kind == "pinned_host"
    assert_as_jax_jit(lambda v: v + 1, out)


def test_host_and_device_arguments_on_one_device_as_jax_jit():
    # Each result in its own type's memory: host where computed from the host array.
    x = jax.device_put(np.arange(8, dtype=np.float32), on_one_device("pinned_host"))
    y = jax.device_put(np.ones(8, dtype=np.float32), on_one_device("device"))

    def fun(a, b):
        return a, b, a * 2, b * 3, a.sum() + 0 * b.sum()

    out, _ = assert_as_jax_jit(fun, x, y)
    assert [o.sharding.memory_kind for o in out] == [
        "pinned_host", "device", "pinned_host", "device", "device"]
    assert_as_jax_jit(fun, out[2], out[1])


def test_host_array_over_a_mesh_transposed_as_jax_jit(mesh):
    # XLA tiles the result unlike the argument: it still comes back in host memory.
    x = jax.device_put(np.arange(64, dtype=np.float32).reshape(8, 8),
                       NamedSharding(mesh, P("x", "y"), memory_kind="pinned_host"))
    out, _ = assert_as_jax_jit(lambda v: v.T * 2, x)
    assert out.sharding.memory_kind == "pinned_host"


@pytest.mark.parametrize("kind", ["pinned_host", "device"])
def test_single_device_sharding_of_a_result_places_it_in_its_memory_as_jax_jit(kind):
    given = jax.sharding.SingleDeviceSharding(jax.devices()[1], memory_kind=kind)
    x = np.arange(8, dtype=np.float32)

    def fun(v):
        return v * 2, v + 1

    ours = jit(fun, out_shardings=(given, None))
    theirs = jax.jit(fun, out_shardings=(given, None))
    for got, want in zip(ours(x), theirs(x), strict=True):
        np.testing.assert_array_equal(got, want)
        assert (got.sharding, got.committed) == (want.sharding, want.committed)
    compiled = ours.lower(x).compile()
    assert compiled.output_shardings == theirs.lower(x).compile().output_shardings
    # jax.export reads the memory from the lowering's result shardings.
    empty = jax.sharding.AbstractMesh((), ())
    exported, reference = (jax.export.export(f, platforms=("cpu",))(x) for f in (ours, theirs))
    assert [a.memory_space for a in exported.out_avals] == \
        [a.memory_space for a in reference.out_avals]
    assert kinds(exported.out_shardings_jax(empty)) == kinds(reference.out_shardings_jax(empty))
    if kind == "pinned_host":  # (deserialized, the types carry the memory)
        loaded = jax.export.deserialize(exported.serialize())
        assert loaded.out_avals[0].memory_space == jax.memory.Space.Host


def test_uncommitted_array_into_another_memory_is_jax_error(mesh):
    x = jax.numpy.arange(16.0).reshape(4, 4)  # uncommitted, in device memory
    host = NamedSharding(mesh, P("x", "y"), memory_kind="pinned_host")
    mismatch = "Memory kinds passed to jax.jit does not match"
    with pytest.raises(ValueError, match=mismatch) as theirs:
        jax.jit(lambda v: v * 2, in_shardings=host)(x)
    with pytest.raises(type(theirs.value), match="Memory kinds passed to jax.jit does not "
                       "match memory kind on the respective arg. Got jit memory kind: "
                       "pinned_host, arg memory kind: device"):
        jit(lambda v: v * 2, in_shardings=host)(x)


def test_host_array_over_an_explicit_mesh_results_in_its_memory_as_jax_jit():
    # On Explicit axes the result's sharding is its type's, memory included.
    mesh = jax.make_mesh((4, 2), ("x", "y"), axis_types=(AxisType.Explicit,) * 2)
    x = jax.device_put(np.arange(32, dtype=np.float32).reshape(8, 4),
                       NamedSharding(mesh, P("x", "y"), memory_kind="pinned_host"))
    ours, theirs = jit(lambda v: v * 2)(x), jax.jit(lambda v: v * 2)(x)
    np.testing.assert_array_equal(ours, theirs)
    assert ours.sharding == theirs.sharding and ours.sharding.memory_kind == "pinned_host"
    assert jit(lambda v: v * 2).lower(x).as_text() == jax.jit(lambda v: v * 2).lower(x).as_text()


@pytest.mark.parametrize("tiling", [None, ((1,),)])
def test_argument_put_with_a_format_in_host_memory(tiling):
    """``device_put(x, Format(layout, SingleDeviceSharding(d, "pinned_host")))`` types
    the array in the device's memory while its buffers are in host memory; jax.jit
    compiles the argument for its sharding's memory (shardc compiled it for the
    device's, then refused the call: "Computation was compiled for input shardings
    that disagree"), and its result in the type's."""
    from jax.experimental.layout import Format, Layout
    from jax.sharding import SingleDeviceSharding

    device = jax.devices()[0]
    host = SingleDeviceSharding(device, memory_kind="pinned_host")
    x = jax.device_put(np.arange(1024, dtype=np.float32).reshape(16, 64),
                       Format(Layout(major_to_minor=(0, 1), tiling=tiling), host))

    def f(b):
        return b + b

    got, want = jit(f)(x), jax.jit(f)(x)
    np.testing.assert_array_equal(got, want)
    assert got.sharding.memory_kind == want.sharding.memory_kind
    ours, theirs = (j(f).lower(x).compile().input_formats[0][0] for j in (jit, jax.jit))
    assert ours.sharding.memory_kind == theirs.sharding.memory_kind == "pinned_host"
    assert ours.layout == theirs.layout
