"""jax.jit's "Some donated buffers were not usable" warning, from shardc's jit when and
only when jax.jit gives it, worded as jax words it (``shardc.compiler.function.donation``)."""

import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P

from shardc.compiler import jit
from shardc.compiler.function.donation import unusable_donations
from shardc.compiler.signature import LeafSignature

pytestmark = pytest.mark.skipif(len(jax.devices()) < 8, reason="needs 8 devices")


def _mesh():
    return jax.make_mesh((4, 2), ("x", "y"), axis_types=(AxisType.Auto,) * 2)


def _donation_warnings(make_jit, fun, placed, **options):
    """The donation warnings one call of ``make_jit(fun, **options)`` gives, as text."""
    args = [jax.device_put(np.array(value), sharding) for value, sharding in placed]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        jax.block_until_ready(make_jit(fun, **options)(*args))
    return [(w.category, str(w.message)) for w in caught if "donated" in str(w.message)]


def _cases():
    mesh = _mesh()
    x = np.ones((8, 4), np.float32)
    s = lambda *spec: NamedSharding(mesh, P(*spec))  # noqa: E731
    return {
        # The result is replicated, the donated argument's shard is a quarter of it.
        "other_sharding": (lambda a: a * 2, [(x, s("x"))], dict(donate_argnums=0,
                                                               out_shardings=s())),
        "same_sharding": (lambda a: a * 2, [(x, s("x"))], dict(donate_argnums=0,
                                                              out_shardings=s("x"))),
        # XLA decides the result's sharding: jax hands it every donation, silently.
        "unspecified": (lambda a: a.sum(0), [(x, s("x"))], dict(donate_argnums=0)),
        "partly_unspecified": (lambda a: (a.sum(0), a), [(x, s("x"))],
                               dict(donate_argnums=0, out_shardings=(s(), None))),
        "fewer_results": (lambda a, b: a + b, [(x, s("x")), (x, s("x"))],
                          dict(donate_argnums=(0, 1), out_shardings=s("x"))),
        "in_shardings": (lambda a: a * 2, [(x, s("x"))],
                         dict(donate_argnums=0, in_shardings=s("x"), out_shardings=s("y"))),
        # Another dtype of as many elements per shard: XLA may still reuse it.
        "same_size": (lambda a: a.astype(jnp.int32), [(x, s("x"))],
                      dict(donate_argnums=0, out_shardings=s("x"))),
        "weak_scalar": (lambda a, b: (a * b, a), [(x, s("x")), (2.0, s())],
                        dict(donate_argnums=(1,), out_shardings=(s("x"), s("x")))),
    }


@pytest.mark.parametrize("case", list(_cases()))
def test_donation_warnings_are_jax_jits(case):
    fun, placed, options = _cases()[case]
    theirs = _donation_warnings(jax.jit, fun, placed, **options)
    ours = _donation_warnings(jit, fun, placed, **options)
    assert ours == theirs


def test_unusable_donation_warns_as_jax():
    mesh = _mesh()
    x = jax.device_put(jnp.ones((8, 4)), NamedSharding(mesh, P("x")))
    with pytest.warns(UserWarning, match=r"Some donated buffers were not usable: float32\[2,4\]"):
        jit(lambda a: a.sum(0), donate_argnums=0,
            out_shardings=NamedSharding(mesh, P()))(x).block_until_ready()


def test_results_take_donations_in_order_then_by_size():
    mesh = _mesh()
    leaf = lambda shape, spec, dtype=jnp.float32: LeafSignature(  # noqa: E731
        "x", jax.ShapeDtypeStruct(shape, dtype), NamedSharding(mesh, P(*spec)))
    args = [leaf((8, 4), ("x",)), leaf((8, 4), ("x",)), leaf((8, 4), ()), leaf((4,), ())]
    # The first result takes the first matching argument; the int result takes the
    # replicated argument by its size; nothing takes the second sharded one or the
    # vector, which no result matches.
    results = [leaf((8, 4), ("x",)), leaf((32,), (), jnp.int32)]
    assert unusable_donations(args, results, [True, True, True, True]) == [1, 3]
    assert unusable_donations(args, results, [False, True, False, False]) == []


def test_explicit_axes_give_the_results_shardings_as_jax_jit():
    # On Explicit axes the result's type carries its sharding: jax counts it as given.
    mesh = jax.make_mesh((4, 2), ("x", "y"), axis_types=(AxisType.Explicit,) * 2)
    placed = [(np.ones((8, 4), np.float32), NamedSharding(mesh, P("x")))]
    with jax.set_mesh(mesh):
        theirs = _donation_warnings(jax.jit, lambda a: a.sum(0), placed, donate_argnums=0)
        ours = _donation_warnings(jit, lambda a: a.sum(0), placed, donate_argnums=0)
    assert theirs and ours == theirs
