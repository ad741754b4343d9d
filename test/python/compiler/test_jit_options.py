"""``jit``'s own arguments: jax.jit's signature, validation, inference and semantics."""

import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import PartitionSpec as P

from shardc.compiler import jit
from shardc.compiler.api import SHARDC_JIT


def test_decorator_factory():
    @jit(static_argnums=1)
    def scale(x, n):
        return x * n

    np.testing.assert_array_equal(scale(jnp.ones(4), 3), jnp.full(4, 3.0))


def test_static_argnames_inferred_from_argnums_and_back():
    traces = []

    def f(x, n):
        traces.append(n)
        return x * n

    by_number = jit(f, static_argnums=1)
    assert by_number.static_argnames == ("n",)
    by_number(jnp.ones(2), n=2)  # static by name, though declared by number
    by_name = jit(f, static_argnames="n")
    assert by_name.static_argnums == (1,)
    by_name(jnp.ones(2), 5)  # static by position, though declared by name
    assert traces == [2, 5]


def test_signature_errors_are_jax_errors():
    f = lambda x, n: x  # noqa: E731
    for kwargs in ({"static_argnames": "m"}, {"donate_argnames": "m"}):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # jax warns about a name not in the signature
            ours = theirs = None
            try:
                jax.jit(f, **kwargs)
            except Exception as error:  # noqa: BLE001 - whatever jax raises, we raise
                theirs = type(error)
            try:
                jit(f, **kwargs)
            except Exception as error:  # noqa: BLE001
                ours = type(error)
        assert ours is theirs
    with pytest.raises(ValueError, match="cannot intersect"):
        jit(f, static_argnames="n", donate_argnames="n")
    with pytest.raises(ValueError, match="can't specify both a device and a backend"):
        jit(f, device=jax.devices()[0], backend="cpu")
    with pytest.raises(ValueError, match="in_shardings should not be specified"):
        jit(f, P(), device=jax.devices()[0])


@pytest.mark.parametrize("option, value, words", [
    ("mesh", "x", "jit's mesh must be a jax.sharding.Mesh, an AbstractMesh or None, got str 'x'"),
    ("mesh", [1, 2], "jit's mesh must be .* got list \\[1, 2\\]"),
    ("propagate", "no", "jit's propagate must be True or False, got 'no'"),
    ("strict", "yes", "jit's strict must be True, False or a .*StrictOptions, got 'yes'"),
    ("strict", 3, "jit's strict must be .* got 3"),
    ("propagation", "bogus", "propagation must be one of \\('shardy', 'cost-aware'\\), got 'bogus'"),
])
def test_shardc_options_of_the_wrong_type_are_type_errors_at_jit(option, value, words):
    # Before, a string mesh failed at the call with AttributeError and a string
    # propagate or strict was taken for True.
    with pytest.raises(TypeError, match=words):
        jit(lambda x: x * 2, **{option: value})


def test_a_function_without_a_signature():
    # A builtin such as int has no inspect.signature: jax.jit takes it unless names
    # are given, which it cannot check.
    for value, error in ((jnp.arange(3), TypeError),
                         (jnp.int32(3), jax.errors.ConcretizationTypeError)):
        with pytest.raises(error) as theirs:
            jax.jit(int)(value)
        with pytest.raises(error) as ours:
            jit(int)(value)
        assert type(ours.value) is type(theirs.value)
        assert str(ours.value).splitlines()[0] == str(theirs.value).splitlines()[0]
    with pytest.raises(ValueError, match="Pass donate_argnums instead of donate_argnames"):
        jax.jit(int, donate_argnames="x")
    with pytest.raises(ValueError, match="Pass donate_argnums instead of donate_argnames"):
        jit(int, donate_argnames="x")


def test_donate_argnames_deletes_the_donated_argument():
    x, y = jnp.ones(8), jnp.ones(8)
    out = jit(lambda a, b: a + b, donate_argnames="a")(x, y)
    np.testing.assert_array_equal(out, jnp.full(8, 2.0))
    assert x.is_deleted() and not y.is_deleted()


@pytest.mark.parametrize("keep_unused", [False, True])
def test_an_unused_donated_argument_is_pruned_with_its_donation(keep_unused):
    """jax.jit prunes an argument the program does not read (unless ``keep_unused``),
    its donation with it: the caller's array stays live; kept, it is consumed."""
    def f(a, b):
        return b + 1

    outcomes = []
    for make in (jax.jit, jit):
        x, y = jnp.ones(8), jnp.ones(8)
        out = make(f, donate_argnums=0, keep_unused=keep_unused)(x, y)
        np.testing.assert_array_equal(out, jnp.full(8, 2.0))
        outcomes.append(x.is_deleted())
        if not keep_unused:
            np.testing.assert_array_equal(x, jnp.ones(8))
    assert outcomes[0] == outcomes[1] == keep_unused


@pytest.mark.parametrize("keep_unused", [False, True])
@pytest.mark.parametrize("under_vmap", [False, True])
def test_unused_arguments_are_not_transferred(keep_unused, under_vmap):
    """As jax.jit, the executable leaves out the arguments the program never reads
    (unless ``keep_unused``): host data given for them is never transferred, on the
    first call or on the C++ fast path's later ones; so does the equation a
    transformation binds (``vmap``, the unused argument unbatched), run eagerly."""
    def f(a, b, c):
        return b * 2

    y = jnp.arange(4.0)
    for make in (jax.jit, jit):
        jitted = make(f, keep_unused=keep_unused)
        if under_vmap:
            jitted = jax.vmap(jitted, in_axes=(None, 0, None))
            y = jnp.arange(8.0).reshape(2, 4)
        np.testing.assert_array_equal(jitted(np.ones(3, np.float32), y, 1.0), y * 2)
        for step in range(3):
            host, placed = np.full(3, step, np.float32), y + step
            if keep_unused:
                with jax.transfer_guard_host_to_device("disallow"), \
                        pytest.raises(Exception, match="Disallowed host-to-device transfer"):
                    jitted(host, y, 1.0)
            else:
                with jax.transfer_guard_host_to_device("disallow"):
                    out = jitted(host, placed, 1.0)
                np.testing.assert_array_equal(out, placed * 2)


def test_compiled_takes_no_unused_argument():
    """Its shardings and formats say None for an argument the executable does not take,
    as jax's (positional and keyword, on a mesh)."""
    mesh = jax.make_mesh((4, 2), ("x", "y"))
    s = jax.sharding.NamedSharding(mesh, P("x"))
    x, w = jax.device_put(jnp.ones((8, 2)), s), jnp.ones((8, 2))

    def f(x, unused, *, w, also_unused):
        return x + w

    args, kwargs = (x, jnp.ones(3)), {"w": w, "also_unused": np.zeros(2)}
    ours = jit(f).lower(*args, **kwargs).compile()
    theirs = jax.jit(f).lower(*args, **kwargs).compile()
    assert ours.input_shardings == theirs.input_shardings
    assert jax.tree.leaves(ours.input_shardings, is_leaf=lambda v: v is None)[1] is None
    assert [fmt.sharding for fmt in jax.tree.leaves(ours.input_formats)] == \
        [fmt.sharding for fmt in jax.tree.leaves(theirs.input_formats)]
    assert ours.in_avals == theirs.in_avals
    for _ in range(2):  # the first call, then jax's C++ dispatch
        out = ours(*args, **kwargs)
        np.testing.assert_array_equal(out, theirs(*args, **kwargs))
        assert out.sharding == theirs(*args, **kwargs).sharding
    kept = jit(f, keep_unused=True).lower(*args, **kwargs).compile()
    assert None not in jax.tree.leaves(kept.input_shardings, is_leaf=lambda v: v is None)



def _main_signature(lowered):
    text = lowered.as_text(debug_info=True)
    return next(line for line in text.splitlines() if "func.func public @main" in line)


@pytest.mark.parametrize("keep_unused", [False, True])
def test_lowered_text_takes_no_unused_argument(keep_unused):
    """The lowered module jax.jit shows (``as_text``, ``compiler_ir``) takes only the
    arguments the program reads, named by their pytree paths, unless ``keep_unused``;
    also one only passed on to a nested jit that ignores it."""
    def f(x, y, *args, **kwargs):
        return y["hi"] + args[1] + sum(kwargs.values())

    def g(x, y):
        return x + jit(lambda u, v: v + 1)(y, x)

    for fun, args, kwargs in ((f, ({"ho": 1.0}, {"hi": 2.0}, 3.0, 4.0), {"z": 5.0, "w": 6.0}),
                              (g, (np.ones(8, np.float32), np.ones(8, np.float32)), {})):
        ours = jit(fun, keep_unused=keep_unused).trace(*args, **kwargs).lower()
        theirs = jax.jit(fun, keep_unused=keep_unused).trace(*args, **kwargs).lower()
        assert _main_signature(ours) == _main_signature(theirs)
        assert str(ours.compiler_ir().body.operations[0].type) == \
            str(theirs.compiler_ir().body.operations[0].type)
        np.testing.assert_array_equal(ours.compile()(*args, **kwargs),
                                      theirs.compile()(*args, **kwargs))


@pytest.mark.parametrize("keep_unused", [False, True])
def test_an_unused_typed_key_is_left_out_as_jax_leaves_it_out(keep_unused):
    """jax's lowering constrains a typed PRNG key argument's data (its trailing
    dimensions replicated) whether the program reads the key or not; jax.jit prunes
    an unused key before lowering, so neither its lowered text nor its compiled
    program takes it (unless ``keep_unused``): shardc's, on one device, the same."""
    def unused(key, x):
        return x + 1

    def used(key, x):
        return x + jax.random.normal(key, x.shape)

    def nested(keys, x):
        return jit(lambda k, v: v * 2)(keys, x)

    x = np.ones(4, np.float32)
    for fun, key in ((unused, jax.random.key(0)), (used, jax.random.key(1)),
                     (nested, jax.random.split(jax.random.key(2), 3)),
                     (unused, jax.random.PRNGKey(3))):
        ours = jit(fun, keep_unused=keep_unused).lower(key, x)
        theirs = jax.jit(fun, keep_unused=keep_unused).lower(key, x)
        assert _main_signature(ours) == _main_signature(theirs), fun.__name__
        ours, theirs = ours.compile(), theirs.compile()
        assert ours.input_shardings == theirs.input_shardings, fun.__name__
        np.testing.assert_array_equal(ours(key, x), theirs(key, x))
        np.testing.assert_array_equal(jit(fun, keep_unused=keep_unused)(key, x),
                                      theirs(key, x))


def test_a_program_with_unordered_effects_takes_no_unused_argument(capfd):
    """``jax.debug.print`` threads no token: jax.jit prunes the arguments such a program
    never reads, as any other's (its lowered text, its compiled shardings), and the
    calls (the first, then jax's C++ dispatch) still print."""
    mesh = jax.make_mesh((4, 2), ("x", "y"))
    x = jax.device_put(jnp.arange(8.0), jax.sharding.NamedSharding(mesh, P("x")))

    def f(x, unused):
        jax.debug.print("sum {}", x.sum())
        return x * 2

    ours, theirs = jit(f).lower(x, x), jax.jit(f).lower(x, x)
    assert _main_signature(ours) == _main_signature(theirs)
    ours, theirs = ours.compile(), theirs.compile()
    assert ours.input_shardings == theirs.input_shardings
    for _ in range(2):
        want = theirs(x, x)
        np.testing.assert_array_equal(ours(x, x), want)
        np.testing.assert_array_equal(jit(f)(x, x), want)
    jax.effects_barrier()
    assert capfd.readouterr().out.count("sum 28.0") == 6  # two rounds of three calls


def test_an_unused_argument_of_another_type_is_refused_as_by_jax_jit():
    """The program leaves the argument out, but a call still checks its type against
    the one it was lowered for: jax's TypeError, naming it."""
    x, y1, y2 = jnp.ones(4), jnp.ones(4), jnp.ones(1)

    def f(x, y):
        return x + 1

    ours = jit(f).lower(x, y1).compile()
    theirs = jax.jit(f).lower(x, y1).compile()
    np.testing.assert_array_equal(ours(x, y1), theirs(x, y1))
    for compiled in (theirs, ours):
        with pytest.raises(TypeError, match=r"Argument 'y' compiled with float32\[4\] "
                                            r"and called with float32\[1\]"):
            compiled(x, y2)

def test_device_and_backend_choose_where_it_runs():
    device = jax.devices()[3]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        on_device = jit(lambda a: a + 1, device=device)(np.ones(4, np.float32))
        on_backend = jit(lambda a: a + 1, backend="cpu")(np.ones(4, np.float32))
    assert on_device.devices() == {device}
    assert on_backend.devices() == {jax.devices("cpu")[0]}


def test_device_and_backend_commit_the_results_as_jax_jit():
    # jax.jit takes device=/backend= as a SingleDeviceSharding for every argument and
    # result: what it returns is committed there, even made from no argument at all.
    device = jax.devices()[1]
    x = jnp.ones(3)  # uncommitted, on device 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        for options in (dict(device=device), dict(backend="cpu")):
            for args in ((), (x,)):
                f = lambda *a: a[0] * 2 if a else jax.lax.add(3.0, 4.0)  # noqa: E731
                ours, theirs = jit(f, **options)(*args), jax.jit(f, **options)(*args)
                assert ours.committed and theirs.committed
                assert ours.devices() == theirs.devices()
    # Without them, a program of uncommitted data returns uncommitted data.
    assert not jit(lambda: jax.lax.add(3.0, 4.0))().committed


def test_meshless_program_follows_its_committed_argument():
    device = jax.devices()[5]
    x = jax.device_put(jnp.ones(4), device)
    out = jit(lambda a: a * 2)(x)
    assert out.devices() == jax.jit(lambda a: a * 2)(x).devices() == {device}


def test_compiler_options_reach_xla():
    f = lambda a: a + 1  # noqa: E731
    ok = jit(f, compiler_options={"xla_embed_ir_in_executable": True})(jnp.ones(2))
    np.testing.assert_array_equal(ok, jnp.full(2, 2.0))
    with pytest.raises(Exception) as theirs:
        jax.jit(f, compiler_options={"xla_no_such_option": 1})(jnp.ones(2))
    with pytest.raises(type(theirs.value), match="xla_no_such_option"):
        jit(f, compiler_options={"xla_no_such_option": 1})(jnp.ones(2))


def test_compiler_options_on_a_nested_jit_are_jax_error():
    # jax's staging rule refuses them on a jit staged into any jaxpr: inside another
    # jit, and (as jax.jit's) under grad, which stages the function to linearize it.
    wording = "`compiler_options` can only be passed to top-level `jax.jit`. Got compiler_options="
    for jitted in (jax.jit, jit):
        inner = jitted(lambda a: a * 2, compiler_options={"invalid_key": "invalid_value"})
        outer = jitted(lambda a: inner(a + 2))
        with pytest.raises(ValueError, match=wording + "{'invalid_key': 'invalid_value'}"):
            outer(jnp.arange(4.0))
        squares = jitted(lambda a: (a * a).sum(),
                         compiler_options={"xla_embed_ir_in_executable": True})
        assert squares(jnp.arange(3.0)) == 5.0
        with pytest.raises(ValueError, match=wording):
            jax.grad(squares)(jnp.arange(3.0))


def test_inline_under_an_enclosing_trace():
    inner = jit(lambda a: jnp.sin(a), inline=True)
    jaxpr = jax.make_jaxpr(lambda a: inner(a) * 2)(jnp.ones(3))
    assert [e.primitive.name for e in jaxpr.eqns] == ["sin", "mul"]
    not_inlined = jax.make_jaxpr(lambda a: jit(jnp.sin)(a) * 2)(jnp.ones(3))
    assert [e.primitive for e in not_inlined.eqns][0] is SHARDC_JIT
    # Printed as jax.jit's equation is.
    assert str(not_inlined) == str(jax.make_jaxpr(lambda a: jax.jit(jnp.sin)(a) * 2)(jnp.ones(3)))


def test_stages_api_is_shaped_like_jax():
    from jax.sharding import AxisType, NamedSharding

    mesh = jax.make_mesh((4, 2), ("x", "y"), axis_types=(AxisType.Auto,) * 2)
    f = lambda a, b: (a @ b).sum()  # noqa: E731
    ours = jit(f, (P("x"), None), mesh=mesh, donate_argnums=1)
    theirs = jax.jit(f, in_shardings=(NamedSharding(mesh, P("x")), None), donate_argnums=1)
    x, y = jnp.ones((8, 4)), jnp.ones((4, 6))
    traced = ours.trace(x, y)
    assert str(traced.jaxpr) == str(theirs.trace(x, y).jaxpr)
    assert ours.eval_shape(x, y).shape == () and traced.out_tree == jax.tree.structure(0.0)
    shaped = jax.core.ShapedArray((8, 4), jnp.float32)  # lower() takes ShapedArrays
    lowered, reference = ours.lower(shaped, y), theirs.lower(shaped, y)
    assert lowered.in_tree == reference.in_tree and lowered.out_tree == reference.out_tree
    assert lowered.args_info == reference.args_info  # types and donation
    assert lowered.as_text("hlo").startswith("HloModule") and "dot" in lowered.as_text("hlo")
    assert lowered.compiler_ir("stablehlo", propagated=True) is lowered.module
    assert str(lowered.compiler_ir("stablehlo")) == str(reference.compiler_ir("stablehlo"))
    assert type(lowered.compiler_ir("hlo")) is type(reference.compiler_ir("hlo"))
    assert lowered.cost_analysis()["flops"] == reference.cost_analysis()["flops"]
    with pytest.raises(ValueError, match="unknown dialect"):
        lowered.as_text("llvm")
    compiled = traced.lower().compile()
    assert compiled.args_info == reference.compile().args_info
    assert traced.in_avals == theirs.trace(x, y).in_avals
    for stage, jax_stage in ((lowered, reference), (compiled, reference.compile())):
        assert stage.in_avals == jax_stage.in_avals
        assert stage.donate_argnums == jax_stage.donate_argnums == (1,)
    assert type(compiled.runtime_executable()) is type(reference.compile().runtime_executable())
    assert compiled.in_tree == lowered.in_tree and compiled.out_tree == lowered.out_tree


def test_single_device_sharding_leaves():
    from jax.sharding import SingleDeviceSharding

    device = jax.devices()[6]
    s = SingleDeviceSharding(device)
    f = lambda a, b: a * b  # noqa: E731
    ours = jit(f, (s, None), s)(np.ones(4, np.float32), jnp.ones(4))
    theirs = jax.jit(f, in_shardings=(s, None), out_shardings=s)(np.ones(4, np.float32),
                                                                  jnp.ones(4))
    assert ours.sharding == theirs.sharding == s
    # Asked for by a SingleDeviceSharding, results are committed to that device.
    x = jnp.arange(4.0)
    for given in ({"out_shardings": s}, {"in_shardings": s}, {}):
        assert jit(lambda a: a, **given)(x).committed == \
            jax.jit(lambda a: a, **given)(x).committed, given
    with pytest.raises(ValueError, match="incompatible devices"):
        jit(f, (s, SingleDeviceSharding(jax.devices()[1])))


def test_single_device_sharding_next_to_a_mesh_sharding_is_jax_error():
    # A SingleDeviceSharding in in_shardings names the program's one device: next to a
    # sharding over eight devices jax.jit raises its "incompatible devices" error before
    # compiling, on a call and on .lower() alike, and so does shardc, naming both.
    from jax.sharding import NamedSharding, SingleDeviceSharding

    mesh = jax.make_mesh((8,), ("d",))
    x = jax.device_put(jnp.arange(16.0), NamedSharding(mesh, P("d")))
    k = jnp.float32(2.0)  # uncommitted: its in_shardings entry alone places it
    in_shardings = (x.sharding, SingleDeviceSharding(jax.devices()[0]))
    f = lambda a, b: a * b  # noqa: E731
    for stage in (lambda j: j(x, k), lambda j: j.lower(x, k)):
        with pytest.raises(ValueError, match="incompatible devices") as theirs:
            stage(jax.jit(f, in_shardings=in_shardings))
        with pytest.raises(ValueError, match="incompatible devices") as ours:
            stage(jit(f, in_shardings=in_shardings))
        assert type(theirs.value) is ValueError
        assert "SingleDeviceSharding" in str(ours.value) and "args[0]" in str(ours.value)
        assert "device_assignment passed to `.compile`" not in str(ours.value)
    # The same one device on both sides is one program.
    one = NamedSharding(jax.make_mesh((1,), ("d",), devices=jax.devices()[:1]), P())
    y = jnp.arange(4.0)
    both = (one, SingleDeviceSharding(jax.devices()[0]))
    np.testing.assert_array_equal(jit(f, in_shardings=both)(y, k),
                                  jax.jit(f, in_shardings=both)(y, k))


def test_one_device_mesh_results_keep_the_arguments_named_sharding():
    from jax.sharding import Mesh, NamedSharding

    mesh = Mesh(np.array(jax.devices()[2:3]), ("x",))
    s = NamedSharding(mesh, P("x"))
    x = jax.device_put(np.arange(8), s)
    for f in (lambda a: a, lambda a: (a * 2, a.sum())):
        ours, theirs = jit(f)(x), jax.jit(f)(x)
        for a, b in zip(jax.tree.leaves(ours), jax.tree.leaves(theirs)):
            assert a.sharding == b.sharding
            np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    assert jit(lambda a: a)(x).sharding == s


def test_deleted_argument_and_compiled_out_info_as_jax():
    from jax.sharding import AxisType, NamedSharding

    mesh = jax.make_mesh((8,), ("x",), axis_types=(AxisType.Auto,))
    arr = jax.device_put(np.arange(8, dtype=np.int32), NamedSharding(mesh, P("x")))
    compiled = jit(lambda x: x * 2).lower(arr).compile()
    info = compiled.out_info
    assert (info.shape, info.dtype, info.sharding) == ((8,), np.int32, NamedSharding(mesh, P("x")))
    gone = jax.device_put(np.arange(8.0))
    gone.delete()
    with pytest.raises(RuntimeError, match="Array has been deleted"):
        jit(lambda x: x + 1)(gone)


def test_jax_unspecified_marker_is_an_unspecified_sharding():
    from jax._src.sharding_impls import UNSPECIFIED  # jax's own tests pass it to jit
    from jax.sharding import NamedSharding

    mesh = jax.make_mesh((2, 2), ("x", "y"), devices=jax.devices()[:4])
    s = NamedSharding(mesh, P("x", "y"))
    x = jax.device_put(np.arange(16).reshape(8, 2), s)
    f = lambda a, b: (a * 2, b.T)  # noqa: E731
    ours = jit(f, in_shardings=(s, UNSPECIFIED), out_shardings=(UNSPECIFIED, s))(x, x)
    theirs = jax.jit(f, in_shardings=(s, UNSPECIFIED), out_shardings=(UNSPECIFIED, s))(x, x)
    for a, b in zip(ours, theirs):
        assert a.sharding == b.sharding
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
