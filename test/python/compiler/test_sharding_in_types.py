"""Sharding in types: on meshes with Explicit axes shardc traces as jax.jit does.

Arguments are traced with their shardings, so ``jax.typeof`` inside the function,
the shardings jnp ops give their results, ``reshard``, ``auto_axes`` and
``shard_map`` in explicit mode, and jax's ``ShardingTypeError``s come out as
under ``jax.jit``; results have exactly the sharding their type says.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import AxisType, NamedSharding, auto_axes, reshard
from jax.sharding import PartitionSpec as P

from shardc.compiler import jit


@pytest.fixture(scope="module")
def mesh():
    return jax.make_mesh((4, 2), ("x", "y"), axis_types=(AxisType.Explicit,) * 2)


@pytest.fixture(scope="module")
def args(mesh):
    x = jax.device_put(np.arange(32, dtype=np.float32).reshape(8, 4), NamedSharding(mesh, P("x", "y")))
    w = jax.device_put(np.ones((4, 6), np.float32), NamedSharding(mesh, P("y", None)))
    return x, w


CASES = {
    "elementwise_and_reduce": lambda a, b: (a * 2, a.sum(axis=0)),
    "reshard": lambda a, b: reshard(a * 2, P("x", None)),
    "matmul_out_sharding": lambda a, b: jnp.matmul(a, b, out_sharding=P("x", None)),
    "auto_axes": lambda a, b: auto_axes(lambda u, v: u @ v, out_sharding=P("x", None))(a, b),
    "shard_map": lambda a, b: jax.shard_map(lambda u: u * 2, in_specs=P("x", "y"),
                                            out_specs=P("x", "y"))(a),
    "typeof_inside": lambda a, b: jnp.zeros_like(a) + len(jax.typeof(a).sharding.spec),
    "ambiguous_contraction": lambda a, b: a @ b,  # jax raises ShardingTypeError
    # Complex constants: reading their value through the bindings aborted the process.
    "complex_grad": lambda a, b: jax.grad(lambda u: jnp.real(jnp.sum(u * (1 + 2j))))(a),
    "complex_constant": lambda a, b: jnp.abs(a * (1 + 2j) + jnp.full(a.shape, 1j, jnp.complex64)),
}


@pytest.mark.parametrize("name", list(CASES))
def test_explicit_mode_like_jax_jit(mesh, args, name):
    f = CASES[name]
    with jax.set_mesh(mesh):
        try:
            theirs = jax.jit(f)(*args)
        except Exception as error:  # noqa: BLE001 - then shardc must raise the same class
            with pytest.raises(type(error)):
                jit(f)(*args)
            return
        ours = jit(f)(*args)
    for a, b in zip(jax.tree.leaves(ours), jax.tree.leaves(theirs), strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
        assert a.sharding == b.sharding, (a.sharding, b.sharding)
        assert jax.typeof(a) == jax.typeof(b)  # the result's type carries its sharding


def test_typeof_inside_sees_the_arguments_sharding(mesh, args):
    seen = []

    def f(a, b):
        seen.append(jax.typeof(a).sharding.spec)
        return a + 1

    with jax.set_mesh(mesh):
        jit(f)(*args)
    assert seen == [P("x", "y")]


def test_unreduced_result(mesh, args):
    # Reduced/unreduced specs crashed when the result was wrapped.
    f = lambda a, b: jnp.matmul(a, b, out_sharding=P("x", None, unreduced={"y"}))  # noqa: E731
    summed = lambda r: reshard(r, P("x", None))  # noqa: E731
    with jax.set_mesh(mesh):
        ours, theirs = jit(f)(*args), jax.jit(f)(*args)
        assert ours.sharding == theirs.sharding
        assert ours.sharding.spec.unreduced == frozenset({"y"})
        np.testing.assert_array_equal(np.asarray(jax.jit(summed)(ours)),
                                      np.asarray(jax.jit(summed)(theirs)))


def test_gradient_of_a_nested_jit_over_reduced_inputs(mesh):
    # The cotangent of a reduced input is unreduced: one device holds it, the others
    # zeros. A nested shardc jit must not pin its results to the replicated sharding
    # their types show (that all-reduced the partial sums: every gradient doubled).
    with jax.set_mesh(mesh):
        a = jax.device_put(np.arange(8.0, dtype=np.float32), P(reduced={"x"}))
        b = jax.device_put(np.arange(8.0, dtype=np.float32), P(reduced={"x"}))
        outs = {}
        for name, wrap in (("jax", jax.jit), ("shardc", jit)):
            inner = wrap(lambda x, y: jax.lax.mul(x, y).sum())
            outs[name] = wrap(jax.grad(inner, argnums=(0, 1)))(a, b)
        for ours, theirs in zip(outs["shardc"], outs["jax"], strict=True):
            assert ours.sharding == theirs.sharding
            assert ours.sharding.spec.unreduced == frozenset({"x"})
            for mine, their in zip(ours.addressable_shards, theirs.addressable_shards):
                np.testing.assert_array_equal(np.asarray(mine.data), np.asarray(their.data))


def test_empty_result_has_its_typed_sharding(mesh, args):
    # XLA reports no usable sharding for an array without elements: shardc took that
    # for a miscompilation ("a shardc bug"). (Reading such an array back to numpy
    # fails under jax.jit too, so only its type and sharding are compared.)
    f = lambda a, b: a[:, 100:116]  # noqa: E731
    with jax.set_mesh(mesh):
        ours, theirs = jit(f)(*args), jax.jit(f)(*args)
    assert ours.shape == theirs.shape == (8, 0)
    assert ours.sharding == theirs.sharding


def test_unreduced_gradient_accumulated_over_microbatches_is_reduced_once():
    # A scan over microbatches accumulates unreduced gradients of a scan over layers
    # and all-reduces once at the end. The accumulator's constraints sit on loop
    # values: their unreduced axes were lost on the loop's carries, and XLA reduced
    # the accumulator inside the loop too (3 all-reduces where jax.jit has 1).
    mesh = jax.make_mesh((2,), ("x",), axis_types=(AxisType.Explicit,))

    def model(stacked_ws, xs):
        layer = lambda h, w: (jnp.dot(h.astype(jnp.bfloat16), w.astype(jnp.bfloat16)), None)  # noqa: E731
        return jnp.sum(jax.lax.scan(layer, xs, stacked_ws)[0])

    def step(stacked_ws, xs):
        def microbatch(acc, x):
            return acc + jax.grad(model)(stacked_ws, x), None
        acc = reshard(jnp.zeros_like(stacked_ws), P(unreduced={"x"}))
        acc, _ = jax.lax.scan(microbatch, acc, xs)
        return reshard(stacked_ws, P()) - 0.01 * reshard(acc, P())

    with jax.set_mesh(mesh):
        ws = jax.device_put(np.ones((4, 4, 4), np.float32), P(reduced={"x"}))
        xs = jax.device_put(np.ones((2, 4, 4), jnp.bfloat16), P(None, "x", None))
        compiled = {name: wrap(step).lower(ws, xs).compile()
                    for name, wrap in (("jax", jax.jit), ("shardc", jit))}
        ours, theirs = compiled["shardc"](ws, xs), compiled["jax"](ws, xs)
    counts = {name: c.as_text().count("all-reduce(") for name, c in compiled.items()}
    assert counts["shardc"] == counts["jax"] == 1, counts
    assert ours.sharding == theirs.sharding
    np.testing.assert_array_equal(np.asarray(ours), np.asarray(theirs))
