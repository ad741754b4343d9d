"""``shardc.compiler.pjit``: jax's pjit semantics (legacy ``with mesh:`` blocks) on shardc."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax._src.pjit import pjit as jax_pjit  # jax.experimental's warns it is deprecated
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P

from shardc.compiler import jit, pjit
from shardc.compiler.function.pjit import PjitFunction

# jax deprecates `with mesh:` blocks; they are what pjit is for.
pytestmark = pytest.mark.filterwarnings("ignore:.*with mesh.*:DeprecationWarning")


@pytest.fixture(scope="module")
def mesh():
    return jax.make_mesh((4, 2), ("x", "y"), axis_types=(AxisType.Auto,) * 2)


PROGRAMS = {
    # None in out_shardings: replicated over the block's mesh.
    "none_is_replicated": (lambda x, y: x + y, (P("x"), P("x")), None, 2),
    # Nothing given: the program still runs on the block's mesh (its context mesh).
    "unspecified_runs_on_the_mesh": (jnp.sin, "not given", "not given", 1),
    "nullary": (lambda: jnp.float32(1), "not given", "not given", 0),
    "uneven_none": (lambda x: x * 2, None, None, 1),
}


@pytest.mark.parametrize("name", list(PROGRAMS))
def test_like_jax_pjit_in_and_out_of_a_legacy_mesh(mesh, name):
    fun, ins, outs, arity = PROGRAMS[name]
    shardings = {k: v for k, v in (("in_shardings", ins), ("out_shardings", outs))
                 if not (isinstance(v, str) and v == "not given")}
    args = [np.arange(64, dtype=np.float32).reshape(8, 8) + k for k in range(arity)]
    for inside in (True, False):
        results = []
        for make in (jax_pjit, pjit):
            try:
                if inside:
                    with mesh:
                        results.append(make(fun, **shardings)(*args))
                else:
                    results.append(make(fun, **shardings)(*args))
            except Exception as error:  # noqa: BLE001 - then shardc must raise its class
                results.append(error)
        ours, theirs = results[1], results[0]
        if isinstance(theirs, Exception):
            assert isinstance(ours, type(theirs)), (inside, ours, theirs)
            continue
        assert ours.sharding == theirs.sharding, (inside, ours.sharding, theirs.sharding)
        np.testing.assert_array_equal(np.asarray(ours), np.asarray(theirs))


def test_stages_under_a_legacy_mesh(mesh):
    f = pjit(lambda x: x * 2, in_shardings=P("x"), out_shardings=None)
    assert isinstance(f, PjitFunction) and f.__name__ == "<lambda>"
    x = jax.ShapeDtypeStruct((8, 2), jnp.float32)
    with mesh:
        lowered = f.lower(x)
        assert f.eval_shape(x).shape == (8, 2)
        assert f.trace(x).out_info.shape == (8, 2)
    compiled = lowered.compile()
    out = compiled(jax.device_put(np.ones((8, 2), np.float32), NamedSharding(mesh, P("x"))))
    assert out.sharding == NamedSharding(mesh, P())


def test_nested_and_differentiated_under_a_legacy_mesh(mesh):
    x = np.arange(16.0, dtype=np.float32).reshape(8, 2)
    results = []
    for make in (jax_pjit, pjit):
        with mesh:
            inner = make(lambda a: a * 2, in_shardings=P("x"), out_shardings=None)
            nested = make(lambda a: inner(a) + 1)(x)
            grad = jax.grad(lambda a: make(lambda b: (b * b).sum(), in_shardings=P("x"))(a))(x)
        results.append((nested, grad))
    for ours, theirs in zip(results[1], results[0]):
        assert ours.sharding == theirs.sharding
        np.testing.assert_array_equal(np.asarray(ours), np.asarray(theirs))


@pytest.mark.parametrize("axis_type", [AxisType.Auto, AxisType.Explicit])
def test_vmap_under_a_legacy_mesh(axis_type):
    # vmap leaves the batch dimension of the equation's shardings UNCONSTRAINED
    # (which jit() refuses from users) and its types on the mesh's Explicit axes.
    mesh = jax.make_mesh((2,), ("x",), devices=jax.devices()[:2], axis_types=(axis_type,))
    x, y = jnp.arange(4), jnp.arange(20).reshape(5, 4)
    results = []
    for make in (jax_pjit, pjit):
        with mesh:
            f = make(lambda a, b: (a + b, a), in_shardings=P("x"), out_shardings=P("x"))
            results.append(jax.vmap(f, in_axes=(None, 0), out_axes=(0, None))(x, y))
    for ours, theirs in zip(results[1], results[0]):
        assert ours.sharding.is_equivalent_to(theirs.sharding, ours.ndim)
        np.testing.assert_array_equal(np.asarray(ours), np.asarray(theirs))


@pytest.mark.parametrize("in_shardings", [None, P()])
def test_keyword_arguments_under_a_legacy_mesh(mesh, in_shardings):
    # pjit's None, read as replicated over the block's mesh, is still no in_shardings:
    # jax's pjit takes keyword arguments then, and refuses them with P().
    def run(p):
        with mesh:
            return p(lambda x, y: x + y, in_shardings=in_shardings)(jnp.ones(8), y=jnp.ones(8))
    if in_shardings is None:
        theirs, ours = run(jax_pjit), run(pjit)
        np.testing.assert_array_equal(np.asarray(ours), np.asarray(theirs))
        assert ours.sharding.is_equivalent_to(theirs.sharding, 1)
    else:
        for p in (jax_pjit, pjit):
            with pytest.raises(ValueError, match="pjit does not support kwargs"):
                run(p)


def test_partition_spec_without_a_mesh_names_pjit_as_jax_does():
    arr = jnp.array([1, 2, 3])
    with pytest.raises(RuntimeError, match="pjit requires a non-empty mesh in context if "
                                           "you are passing `PartitionSpec`s to in_shardings"
                       ) as theirs:
        jax_pjit(lambda x: x, in_shardings=P("x"))(arr)
    with pytest.raises(type(theirs.value), match=r"pjit requires a non-empty mesh in context "
                                                 r"if you are passing `PartitionSpec`s to "
                                                 r"in_shardings\..*\(args\[0\]: PartitionSpec"):
        pjit(lambda x: x, in_shardings=P("x"))(arr)
    with pytest.raises(RuntimeError, match="jit requires a non-empty mesh.*out_shardings"):
        jax.jit(lambda x: x, out_shardings=P("x"))(arr)
    with pytest.raises(RuntimeError, match="^jit requires a non-empty mesh.*out_shardings"):
        jit(lambda x: x, out_shardings=P("x"))(arr)
