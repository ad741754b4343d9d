"""Committed arguments against the shardings given to jit, as jax.jit treats them.

jax.jit's rule: a committed argument given a sharding must be *tiled* as that
sharding says (the same HLO sharding); its mesh's axis names, its devices and
their order do not matter, and jax moves it where the program wants it. A jit call
does; a compiled program's call refuses another device order (and shardc's error
says which orders). ``jit(device=...)`` moves every argument as ``device_put``
does. ``GSPMDSharding``s are shardings like the others.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax._src import array, core
from jax.extend.sharding import GSPMDSharding
from jax.sharding import AxisType, Mesh, NamedSharding, SingleDeviceSharding
from jax.sharding import PartitionSpec as P

from shardc.compiler import jit
from shardc.dialects.errors import (
    ArgumentShardingError,
    DeviceMismatchError,
    UncommittedArrayError,
)

AUTO = (AxisType.Auto,)


def mesh_of(devices, name="x"):
    return Mesh(np.array(devices), (name,), axis_types=AUTO)


@pytest.fixture(scope="module")
def devices():
    return jax.devices()[:4]


@pytest.fixture(scope="module")
def x():
    return jnp.arange(32.0).reshape(8, 4)


def both(make_call):
    return make_call(jax.jit), make_call(jit)


def assert_same(theirs, ours):
    np.testing.assert_array_equal(np.asarray(ours), np.asarray(theirs))
    assert ours.sharding.is_equivalent_to(theirs.sharding, theirs.ndim), (ours.sharding,
                                                                          theirs.sharding)


def twice(a):
    return a * 2


def test_same_devices_under_other_axis_names(devices, x):
    given = NamedSharding(mesh_of(devices, "x"), P("x"))
    arg = jax.device_put(x, NamedSharding(mesh_of(devices, "y"), P("y")))
    assert_same(*both(lambda j: j(twice, in_shardings=given)(arg)))
    replicated = jax.device_put(x, NamedSharding(mesh_of(devices, "y"), P()))
    assert_same(*both(lambda j: j(twice, in_shardings=NamedSharding(given.mesh, P()))(
        replicated)))


def test_another_tiling_is_jax_error_naming_both_tilings(devices, x):
    given = NamedSharding(mesh_of(devices, "x"), P("x"))
    arg = jax.device_put(x, NamedSharding(mesh_of(devices, "y"), P()))
    words = "Sharding passed to jit does not match the sharding on the respective arg"
    with pytest.raises(ValueError, match=words):
        jax.jit(twice, in_shardings=given)(arg)
    with pytest.raises(ArgumentShardingError, match=words) as ours:
        jit(twice, in_shardings=given)(arg)
    assert "tiled as {replicated}" in str(ours.value)
    assert "{devices=[4,1]" in str(ours.value)


def test_a_shape_dtype_struct_is_a_committed_argument_to_be(devices, x):
    # Its sharding was dropped for in_shardings' before: the lowering took another
    # tiling than the one the caller declared, where jax.jit refuses it.
    given = NamedSharding(mesh_of(devices, "x"), P("x"))
    words = "Sharding passed to jit does not match the sharding on the respective arg"
    for own in (NamedSharding(given.mesh, P()), NamedSharding(mesh_of(devices[:2]), P("x"))):
        declared = jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=own)
        with pytest.raises(ValueError, match=words):
            jax.jit(twice, in_shardings=given).lower(declared)
        with pytest.raises(ArgumentShardingError, match="(?s)" + words + ".*args\\[0\\]: the argument is tiled"):
            jit(twice, in_shardings=given).lower(declared)
    same_tiling = jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=NamedSharding(
        mesh_of(devices, "y"), P("y")))
    theirs, ours = both(lambda j: j(twice, in_shardings=given).lower(same_tiling).compile())
    assert ours.input_shardings[0][0].is_equivalent_to(theirs.input_shardings[0][0], x.ndim)


def test_a_negative_dimension_is_an_argument_error_not_an_mlir_error():
    with pytest.raises(TypeError, match=r"must have every element be nonnegative, got \(-1, 4\)"
                       r" for the argument at path a"):
        jit(lambda a: a * 2).lower(jax.ShapeDtypeStruct((-1, 4), jnp.float32))


@pytest.mark.parametrize("spec", [P("x"), P()])
def test_same_devices_in_another_order_are_moved(devices, x, spec):
    given = NamedSharding(mesh_of(devices), spec)
    arg = jax.device_put(x, NamedSharding(mesh_of(devices[::-1]), spec))
    theirs, ours = both(lambda j: j(twice, in_shardings=given)(arg))
    assert_same(theirs, ours)
    assert [d.id for d in ours.sharding._device_assignment] == [0, 1, 2, 3]
    # Again and again: jax.jit's C++ fast path passes such an argument on unmoved and
    # crashes the process on the second call; shardc keeps these calls off it.
    function = jit(twice, in_shardings=given)
    for _ in range(3):
        assert_same(theirs, function(arg))


def test_other_devices_are_moved(x):
    given = NamedSharding(mesh_of(jax.devices()[:4]), P("x"))
    arg = jax.device_put(x, NamedSharding(mesh_of(jax.devices()[4:]), P("x")))
    assert_same(*both(lambda j: j(twice, in_shardings=given)(arg)))


def test_a_compiled_program_names_the_device_orders(devices, x):
    given = NamedSharding(mesh_of(devices), P("x"))
    arg = jax.device_put(x, NamedSharding(mesh_of(devices[::-1]), P("x")))
    words = "Computation was compiled for input shardings that disagree"
    with pytest.raises(ValueError, match=words):
        jax.jit(twice, in_shardings=given).lower(x).compile()(arg)
    with pytest.raises(ArgumentShardingError, match=words) as ours:
        jit(twice, in_shardings=given).lower(x).compile()(arg)
    assert "passed over devices [3, 2, 1, 0], required over [0, 1, 2, 3]" in str(ours.value)


def test_arguments_that_follow_their_data_in_two_orders_are_jax_error(devices, x):
    a = jax.device_put(x, NamedSharding(mesh_of(devices), P("x")))
    b = jax.device_put(x, NamedSharding(mesh_of(devices[::-1]), P("x")))
    words = r"Received incompatible devices for jitted computation.*device ids \[3, 2, 1, 0\]"
    with pytest.raises(ValueError, match=words):
        jax.jit(lambda a, b: a + b)(a, b)
    with pytest.raises(ValueError, match=words):  # jax's own, from tracing
        jit(lambda a, b: a + b)(a, b)


def gspmd(devices, x):
    return GSPMDSharding(tuple(devices),
                         NamedSharding(mesh_of(devices), P("x"))._to_xla_hlo_sharding(x.ndim))


def test_gspmd_shardings_in_and_out(devices, x):
    sharding = gspmd(devices, x)
    assert_same(*both(lambda j: j(twice, in_shardings=sharding)(x)))
    assert_same(*both(lambda j: j(twice, out_shardings=sharding)(x)))
    placed = jax.device_put(x, sharding)
    assert_same(*both(lambda j: j(twice)(placed)))
    given = NamedSharding(mesh_of(devices), P("x"))
    assert_same(*both(lambda j: j(twice, in_shardings=given)(placed)))


def test_a_gspmd_sharding_on_the_context_mesh_is_read_on_it(devices, x):
    mesh = mesh_of(devices)
    with jax.set_mesh(mesh):
        out = jit(twice, in_shardings=gspmd(devices, x))(x)
    assert out.sharding == NamedSharding(mesh, P("x"))


@pytest.mark.parametrize("placement", ["one device", "sharded", "uncommitted"])
def test_jit_device_moves_committed_arguments(devices, x, placement):
    arg = {"one device": lambda: jax.device_put(x, jax.devices()[1]),
           "sharded": lambda: jax.device_put(x, NamedSharding(mesh_of(devices), P("x"))),
           "uncommitted": lambda: x}[placement]()
    target = jax.devices()[3]
    with pytest.warns(DeprecationWarning):
        theirs, ours = both(lambda j: j(twice, device=target)(arg))
    assert_same(theirs, ours)
    assert ours.sharding == SingleDeviceSharding(target)


@pytest.mark.parametrize("placement", ["one device", "uncommitted"])
def test_single_device_in_shardings_move_committed_arguments(x, placement):
    """A SingleDeviceSharding given for every argument moves it to that device,
    committed or not, as jit(device=) does (shardc took it for "follow the data" and
    refused an argument committed to another device)."""
    arg = jax.device_put(x, jax.devices()[1]) if placement == "one device" else x
    target = SingleDeviceSharding(jax.devices()[3])
    theirs, ours = both(lambda j: j(twice, in_shardings=target)(arg))
    assert_same(theirs, ours)
    assert ours.sharding == target


def test_single_device_in_shardings_refuse_a_tiled_argument(devices, x):
    """A committed argument tiled over several devices is not one device's copy:
    jax's "does not match" error, as for any given sharding."""
    arg = jax.device_put(x, NamedSharding(mesh_of(devices), P("x")))
    target = SingleDeviceSharding(jax.devices()[3])
    for j in (jax.jit, jit):
        with pytest.raises(ValueError, match="Sharding passed to jit does not match"):
            j(twice, in_shardings=target)(arg)


def test_single_device_in_shardings_compiled_refuses_another_device(x):
    """A compiled program's call moves nothing: an argument on another device is
    jax's ValueError."""
    arg = jax.device_put(x, jax.devices()[1])
    target = SingleDeviceSharding(jax.devices()[3])
    for j in (jax.jit, jit):
        compiled = j(twice, in_shardings=target).lower(arg).compile()
        with pytest.raises(ValueError):
            compiled(arg)


def test_jit_device_compiled_runs_on_that_device_and_moves_arguments(devices, x):
    target = jax.devices()[1]
    placed = jax.device_put(x, NamedSharding(mesh_of(devices), P("x")))
    with pytest.warns(DeprecationWarning):
        ours = jit(twice, device=target)
    compiled = ours.lower(jax.core.ShapedArray(x.shape, x.dtype)).compile()
    out = compiled(placed)
    assert out.sharding == SingleDeviceSharding(target)
    np.testing.assert_array_equal(np.asarray(out), np.asarray(x) * 2)


def test_jit_device_under_a_context_mesh_is_jax_error(devices, x):
    words = "Mesh context manager should not be used with jit when backend or device"
    with jax.set_mesh(mesh_of(devices)):
        for j in (jax.jit, jit):
            with pytest.warns(DeprecationWarning), pytest.raises(ValueError, match=words):
                j(twice, device=jax.devices()[0])(x)


def test_jit_device_with_a_constraint_on_other_devices_names_both(devices):
    mesh = mesh_of(devices)
    words = (r"Received incompatible devices for jitted computation. Got explicit output "
             r"sharding with device ids \[0\].*sharding_constraint inside jit with device ids")

    def zeros():
        return jax.lax.with_sharding_constraint(jnp.zeros((8, 4)), NamedSharding(mesh, P("x")))
    for j in (jax.jit, jit):
        with pytest.warns(DeprecationWarning), pytest.raises(ValueError, match=words):
            j(zeros, device=jax.devices()[0])()


def test_committed_argument_on_other_devices_than_a_constraint_inside_is_jax_error(devices):
    mesh = jax.make_mesh((2, 2), ("x", "y"), axis_types=AUTO * 2)

    def sharded_inp(inp):
        return jax.lax.with_sharding_constraint(inp, NamedSharding(mesh, P("x", "y")))

    committed = jax.device_put(jnp.zeros((8, 2), jnp.bfloat16), jax.devices()[0])
    wording = (r"Received incompatible devices for jitted computation. Got argument inp of "
               r".*sharded_inp with shape bfloat16\[8,2\] and with device ids \[0\] on "
               r"platform CPU and sharding_constraint inside jit with device ids \[0, 1, 2, 3\]")
    with pytest.raises(ValueError, match=wording):
        jax.jit(sharded_inp)(committed)
    with pytest.raises(DeviceMismatchError, match=wording):
        jit(sharded_inp)(committed)
    # On the constraint's devices, it runs as jax.jit runs it.
    placed = jax.device_put(jnp.ones((8, 2), jnp.bfloat16), NamedSharding(mesh, P("x")))
    ours, theirs = jit(sharded_inp)(placed), jax.jit(sharded_inp)(placed)
    assert ours.sharding == theirs.sharding
    np.testing.assert_array_equal(np.asarray(ours), np.asarray(theirs))


def test_uncommitted_array_on_several_devices_is_jax_error():
    mesh = jax.make_mesh((4, 2), ("x", "y"), axis_types=AUTO * 2)
    inp = np.arange(16, dtype=np.int32).reshape(8, 2)
    # jax's own way to make one (users cannot): an ArrayImpl of per-device buffers.
    arr = array.ArrayImpl(core.ShapedArray(inp.shape, np.int32), NamedSharding(mesh, P()),
                          [jax.device_put(inp, d) for d in mesh.devices.flat], committed=False)
    wording = "Having uncommitted Array sharded on multiple devices is not supported."
    with pytest.raises(NotImplementedError, match=wording):
        jax.jit(lambda x: x)(arr)
    with pytest.raises(UncommittedArrayError, match=wording):
        jit(lambda x: x)(arr)


def test_uncommitted_arguments_run_on_the_default_device():
    f = lambda x, y: x + y  # noqa: E731
    with jax.default_device(jax.devices()[1]):
        b = jnp.array([4.0, 5.0, 6.0])
        assert not b.committed
        theirs, ours = jax.jit(f)(b, b), jit(f)(b, b)
    assert ours.devices() == theirs.devices() == {jax.devices()[1]}
    assert not ours.committed and not theirs.committed
    np.testing.assert_array_equal(np.asarray(ours), np.asarray(theirs))
    # Outside the block, the same program runs on the first device again.
    a = jnp.array([1.0, 2.0, 3.0])
    assert jit(f)(a, a).devices() == jax.jit(f)(a, a).devices() == {jax.devices()[0]}


def test_committed_prng_keys_on_an_explicit_mesh_are_described_as_jax_names_them():
    """Committed PRNG key arrays among the arguments (jax.random under sharding in
    types): checking their devices describes them with jax's key dtype."""
    mesh = jax.make_mesh((4, 2), ("x", "y"), axis_types=(AxisType.Explicit,) * 2)
    with jax.set_mesh(mesh):
        keys = jax.random.split(jax.random.key(0), 8)
        keys = jax.device_put(keys, P("x"))
        sample = lambda k: jax.vmap(lambda k: jax.random.normal(k, (4,)))(k)  # noqa: E731
        ours, theirs = jit(sample)(keys), jax.jit(sample)(keys)
    np.testing.assert_array_equal(np.asarray(ours), np.asarray(theirs))
    assert ours.sharding == theirs.sharding
    from shardc.compiler.signature import describe_argument
    text = describe_argument("keys", "sample", jax.typeof(keys))
    assert text == "argument keys of sample with shape key<fry>[8]"
