"""A shardc-jitted function under jax's transformations behaves as ``jax.jit`` does.

Under ``grad``, ``vjp``, ``jvp``, ``vmap``, ``jit``, ``eval_shape``,
``checkpoint``, loop bodies, ``shard_map``, another shardc ``jit`` and
``jax.disable_jit`` the results (and, where jax.jit returns arrays, their
shardings) equal ``jax.jit``'s with the same shardings. Executing a
transformed equation eagerly compiles it with shardc, never with jax.
"""

import os
import subprocess
import sys
import textwrap

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax._src import dispatch  # what jax.jit reads its devices from
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P

import shardc.compiler.lowered as lowered_module
from shardc.compiler import jit
from shardc.compiler.api import SHARDC_JIT


@pytest.fixture(scope="module")
def mesh():
    return jax.make_mesh((4, 2), ("x", "y"), axis_types=(AxisType.Auto,) * 2)


def _loss(w, x):
    return jnp.tanh(x @ w).sum()


@pytest.fixture(scope="module")
def pair(mesh):
    """The same function jitted by shardc and by jax, with the same shardings."""
    specs = (P(None, "y"), P("x"))
    ours = jit(_loss, in_shardings=specs, mesh=mesh)
    theirs = jax.jit(_loss, in_shardings=tuple(NamedSharding(mesh, s) for s in specs))
    return ours, theirs


@pytest.fixture(scope="module")
def args(mesh):
    w = jax.device_put(jnp.linspace(-1, 1, 32).reshape(8, 4), NamedSharding(mesh, P(None, "y")))
    x = jnp.arange(64.0).reshape(8, 8) / 64
    return w, x


def _assert_same(ours, theirs):
    for a, b in zip(jax.tree.leaves(ours), jax.tree.leaves(theirs), strict=True):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-6, atol=1e-6)
        if isinstance(b, jax.Array) and not isinstance(b, jax.core.Tracer):
            assert a.sharding.is_equivalent_to(b.sharding, b.ndim), (a.sharding, b.sharding)


TRANSFORMS = {
    "grad": lambda f: jax.grad(f),
    "grad_argnums": lambda f: jax.grad(f, argnums=(0, 1)),
    "value_and_grad": lambda f: jax.value_and_grad(f),
    "vjp": lambda f: lambda w, x: jax.vjp(f, w, x)[1](1.0),
    "jvp": lambda f: lambda w, x: jax.jvp(f, (w, x), (w, x)),
    "vmap": lambda f: lambda w, x: jax.vmap(f, in_axes=(None, 0))(w, jnp.stack([x, 2 * x])),
    "vmap_grad": lambda f: lambda w, x: jax.vmap(jax.grad(f), in_axes=(None, 0))(
        w, jnp.stack([x, 2 * x])),
    "jit": lambda f: jax.jit(f),
    "jit_grad": lambda f: jax.jit(jax.grad(f)),
    "checkpoint_grad": lambda f: jax.grad(jax.checkpoint(f)),
    "hessian_diag": lambda f: lambda w, x: jax.jacfwd(jax.grad(f))(w, x).sum(),
    "scan_body": lambda f: lambda w, x: jax.lax.scan(
        lambda c, xi: (c + f(w, xi), None), 0.0, jnp.stack([x, x]))[0],
    "fori_loop_grad": lambda f: jax.grad(lambda w, x: jax.lax.fori_loop(
        0, 3, lambda i, c: c + f(w, x * i), 0.0)),
    "cond_branch": lambda f: lambda w, x: jax.lax.cond(x.sum() > 0, f, lambda *a: 0.0, w, x),
}


@pytest.mark.parametrize("name", list(TRANSFORMS))
def test_transformed_equals_jax_jit(pair, args, name):
    ours, theirs = pair
    transform = TRANSFORMS[name]
    _assert_same(transform(ours)(*args), transform(theirs)(*args))


def test_eval_shape_and_make_jaxpr(pair, args):
    ours, theirs = pair
    assert jax.eval_shape(ours, *args) == jax.eval_shape(theirs, *args)
    jaxpr = jax.make_jaxpr(jax.grad(ours))(*args)
    assert [e.primitive for e in jaxpr.eqns if e.primitive.name == "jit"] == \
        [SHARDC_JIT, SHARDC_JIT]


def test_eager_grad_compiles_with_shardc(mesh, args, monkeypatch):
    compiled = []
    original = lowered_module.compile_program

    def counting(*a, **k):
        compiled.append(1)
        return original(*a, **k)

    monkeypatch.setattr(lowered_module, "compile_program", counting)
    ours = jit(lambda w, x: jnp.sin(x @ w).sum(), in_shardings=(P(None, "y"), P("x")),
               mesh=mesh)  # new: nothing of it is cached yet
    jax.grad(ours)(*args)  # the forward and the backward equation
    assert len(compiled) == 2


def test_nested_in_a_shardc_jit_propagates_the_inner_shardings(pair, args, mesh):
    ours, theirs = pair
    outer = jit(lambda w, x: ours(w, x) * 2)
    _assert_same(outer(*args), 2 * theirs(*args))
    text = outer.lower(*args).as_text(propagated=True)
    # The inner jit's argument shardings reach the outer module and propagate.
    assert 'stablehlo.dot_general' in text and '<@mesh, [{"x"}, {"y"}]>' in text


@pytest.mark.parametrize("given", ["in_shardings", "out_shardings"])
def test_nested_in_jax_jit_places_the_program_on_the_inner_shardings_devices(mesh, given):
    """jax.jit takes its devices from the shardings of the jits inside it too
    (uncommitted arguments): a shardc jit's count as jax.jit's do."""
    s = NamedSharding(mesh, P("x", "y"))
    x = np.arange(16.0).reshape(8, 2)
    outs = [jax.jit(lambda v, inner=jitted(lambda v: v * 2, **{given: s}): inner(v) + 1)(x)
            for jitted in (jit, jax.jit)]
    _assert_same(*outs)
    assert outs[0].sharding == outs[1].sharding == s
    ours, theirs = (
        [str(sharding) for sharding, _ in dispatch.get_intermediate_shardings(
            jax.jit(lambda v, inner=jitted(lambda v: v * 2, **{given: s}): inner(v))
            .trace(x).jaxpr.jaxpr)]
        for jitted in (jit, jax.jit))
    assert ours == theirs and str(s) in ours


def test_grad_under_an_outer_shardc_jit(pair, args):
    ours, theirs = pair
    _assert_same(jit(jax.grad(ours))(*args), jax.jit(jax.grad(theirs))(*args))


def test_inside_shard_map(mesh):
    double = jit(lambda y: y * 2)
    body = jax.shard_map(lambda xs: double(xs), mesh=mesh, in_specs=P("x"), out_specs=P("x"))
    x = jnp.arange(16.0).reshape(8, 2)
    np.testing.assert_array_equal(body(x), 2 * x)


def test_disable_jit_runs_the_function(pair, args):
    ours, theirs = pair
    calls = []

    def f(w, x):
        calls.append(type(x))
        return _loss(w, x)

    with jax.disable_jit():
        value = jit(f)(*args)
    assert calls and not issubclass(calls[0], jax.core.Tracer)
    np.testing.assert_allclose(value, theirs(*args), rtol=1e-6)


def test_jit_of_a_grad_of_a_shardc_jit_keeps_its_own_function(pair, args):
    # jax.grad copies the wrapped function's __dict__ (a shardc jit's state)
    # onto the function it returns; jitting that must trace the gradient.
    ours, theirs = pair
    grad_fn = jax.grad(ours)
    assert jit(grad_fn).fun is grad_fn
    _assert_same(jit(grad_fn)(*args), jax.grad(theirs)(*args))


def test_eager_grad_through_a_shard_map_runs_on_its_mesh():
    # The backward equation names no mesh in its signature: its devices come from
    # the shard_map's mesh, not from the axis-less mesh jax also writes (which
    # made the program one device with four partitions: a custom call XLA's CPU
    # cannot run).
    mesh = jax.sharding.Mesh(np.array(jax.devices()[:4]), ("i",))

    def loss(w, x):
        @jax.shard_map(mesh=mesh, in_specs=P("i"), out_specs=P())
        def f(x):
            return jax.lax.psum(((w * x) ** 2).sum(), "i")
        return f(x)

    x = jnp.arange(8.0)
    ours, theirs = jax.grad(jit(loss))(3.0, x), jax.grad(jax.jit(loss))(3.0, x)
    np.testing.assert_allclose(np.asarray(ours), np.asarray(theirs))
    assert ours.sharding == theirs.sharding


def test_vmap_with_spmd_axis_name_executes_the_equation_once():
    # Executing the batched equation happens while vmap's axis is still in the
    # trace state; it must run, not bind itself again (that recursed forever).
    mesh = jax.make_mesh((2, 2, 2), ("replica", "data", "mdl"),
                         axis_types=(jax.sharding.AxisType.Auto,) * 3)
    x = jnp.arange(128).reshape(8, 4, 2, 2)

    def f(a):
        return jax.lax.with_sharding_constraint(a, NamedSharding(mesh, P("data", None, None)))

    ours = jax.vmap(jit(f), spmd_axis_name="mdl")(x)
    theirs = jax.vmap(jax.jit(f), spmd_axis_name="mdl")(x)
    assert ours.sharding == theirs.sharding
    np.testing.assert_array_equal(np.asarray(ours), np.asarray(theirs))


def test_checkify_and_jet_bind_shardc_primitive_and_equal_jax_jit(mesh):
    # Their jit rules live in modules jax imports lazily and bind the primitive
    # through their module's globals: copied for shardc's, they bind shardc's.
    from jax.experimental import checkify, jet

    sharding = NamedSharding(mesh, P("x"))
    x = jax.device_put(jnp.arange(8.0) - 3.0, sharding)
    divide = lambda x: 1.0 / x  # noqa: E731
    ours, theirs = (checkify.checkify(j(divide, in_shardings=sharding, out_shardings=sharding),
                                      errors=checkify.float_checks)
                    for j in (jit, jax.jit))
    jaxpr = jax.make_jaxpr(ours)(x)
    assert [e.primitive for e in jaxpr.eqns if e.primitive.name == "jit"] == [SHARDC_JIT]
    (our_error, our_out), (their_error, their_out) = ours(x), theirs(x)
    assert our_error.get() == their_error.get() and "division by zero" in our_error.get()
    _assert_same(our_out, their_out)
    zero = x.at[3].set(1.0)
    assert ours(zero)[0].get() is None
    series = lambda j: jet.jet(j(jnp.sin), (x,), ((jnp.ones(8),),))  # noqa: E731
    _assert_same(series(jit), series(jax.jit))


def test_sparsify_of_a_function_calling_jit_after_shardc_was_imported():
    # jax's sparse transform (slow to import) is imported by the user after shardc;
    # its rule for the jit primitive must still reach shardc's. In a fresh process,
    # where nothing imported the transform before shardc.
    script = textwrap.dedent(
        """
        import jax, jax.numpy as jnp, sys
        from shardc.compiler import jit
        assert "jax.experimental.sparse.transform" not in sys.modules
        from jax.experimental import sparse
        M = sparse.BCOO.fromdense(jnp.array([[0., 1.], [2., 0.]]))
        v = jnp.array([1., 2.])
        for j in (jax.jit, jit):
            out = sparse.sparsify(lambda M, v: j(lambda M, v: (M @ v, 2 * M))(M, v))(M, v)
            print(out[0].tolist(), out[1].todense().tolist(), type(out[1]).__name__)
        """)
    run = subprocess.run([sys.executable, "-P", "-c", script], capture_output=True, text=True,
                         timeout=180, env={**os.environ, "JAX_PLATFORMS": "cpu"})
    assert run.returncode == 0, run.stderr
    theirs, ours = run.stdout.splitlines()
    assert ours == theirs == "[2.0, 2.0] [[0.0, 2.0], [4.0, 0.0]] BCOO"


def test_pallas_fuser_through_jit_imported_after_shardc():
    # Any jax module imported after shardc with rules for jax's jit primitive (here
    # Pallas's fuser: its block spec rules) has them copied to shardc's. In a fresh
    # process, where shardc's primitive is made before the fuser is imported.
    script = textwrap.dedent(
        """
        import jax, jax.numpy as jnp, sys
        from shardc.compiler import jit
        assert "jax._src.pallas.fuser.block_spec" not in sys.modules
        from jax._src.pallas.fuser import block_spec as block_spec_lib
        from jax.experimental import pallas as pl
        spec = pl.BlockSpec((None, 1, 128, 128), lambda i, j, k, l, _: (i, l, k, j))
        x = jax.ShapeDtypeStruct((1, 1, 512, 512), jnp.float32)
        for j in (jax.jit, jit):
            out = block_spec_lib.push_block_spec(lambda x: j(jnp.sin)(x), spec)(x)
            print(out.block_shape, out.index_map(0, 1, 2, 3, 4))
        """)
    run = subprocess.run([sys.executable, "-P", "-c", script], capture_output=True, text=True,
                         timeout=180, env={**os.environ, "JAX_PLATFORMS": "cpu"})
    assert run.returncode == 0, run.stderr
    theirs, ours = run.stdout.splitlines()
    assert ours == theirs == "(None, 1, 128, 128) (0, 3, 2, 1)"


def test_inside_a_pallas_kernel_on_refs_and_values_as_jax_jit():
    """Pallas's interpreter walks into jax's jit equations (by the primitive's identity);
    a shardc jit on a kernel's Refs binds jax's primitive there, as jax.jit does."""
    # (Pallas imported here, as in the fuser's test: the other tests run without it.)
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import tpu as pltpu

    x = jnp.arange(8 * 128, dtype=jnp.float32).reshape(8, 128)

    def run(jitted):
        def on_values(x_ref, o_ref):
            o_ref[...] = jitted(lambda v: jnp.sin(v) * 2)(x_ref[...])

        def on_refs(x_ref, o_ref):
            def body(xr, orf):
                orf[...] = xr[...] + 1
            jitted(body)(x_ref, o_ref)

        return [pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                               interpret=pltpu.InterpretParams())(x)
                for kernel in (on_values, on_refs)]

    _assert_same(run(jit), run(jax.jit))
