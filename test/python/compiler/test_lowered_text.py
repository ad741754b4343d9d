"""``Lowered.as_text()`` and ``compiler_ir()`` are jax.jit's; ``propagated=True`` is shardc's.

jax's ``Lowered`` is the module handed to the compiler, which propagates: the
shardings as the user wrote them (open dims ``{?}``, constraints, ``shard_map``'s
``sdy.manual_computation``, PRNG keys' key-data constraints, ``unreduced``
axes). shardc's plain text must be that module, character for character (the
module name included: both are jax's ``jit_<function>``), and its propagated
module stays one keyword away and is what it compiles.
"""

from __future__ import annotations

import contextlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P

from bench.zoo import REGISTRY as ZOO
from shardc.compiler import jit


def _mesh(shape, names, axis_type=AxisType.Auto):
    return jax.make_mesh(shape, names, axis_types=(axis_type,) * len(shape))


def unconstrained_dims():
    """Constraints on a pytree with unconstrained dims (pjit_test's)."""
    mesh = _mesh((2, 2), ("x", "y"))

    def f(x):
        x = jax.lax.with_sharding_constraint(
            x, [NamedSharding(mesh, P(P.UNCONSTRAINED, "y", None)),
                NamedSharding(mesh, P("x", P.UNCONSTRAINED, None))])
        return [{"a": x[0]["a"] * 2, "b": x[0]["b"]}, x[1]]

    v = np.arange(128).reshape(2, 8, 8)
    return f, ([{"a": v, "b": v * 2}, v * 3],), None


def shard_map_partial_auto():
    """``shard_map`` manual over one axis, a constraint on the other inside."""
    mesh = _mesh((2, 2), ("i", "j"))

    def g(x):
        return jax.lax.with_sharding_constraint(x, P(None, "j")) ** 2

    def f(x):
        x = jax.shard_map(g, mesh=mesh, in_specs=P("i", None), out_specs=P("i", None),
                          axis_names=frozenset({"i"}))(x)
        return jax.lax.with_sharding_constraint(x, NamedSharding(mesh, P("i", "j")))

    v = jax.device_put(jnp.arange(32.0).reshape(4, 8), NamedSharding(mesh, P("i", "j")))
    return f, (v,), mesh


def prng_keys():
    """A key result without a given sharding: jax pins its key-data dims."""
    mesh = _mesh((4, 2), ("x", "y"))
    seeds = jax.device_put(np.arange(16, dtype=np.uint32).reshape(8, 2),
                           NamedSharding(mesh, P("x", "y")))

    def make_keys(seeds):
        return jax.vmap(jax.vmap(jax.random.key))(seeds).T

    return make_keys, (seeds,), None


def prng_keys_given_out_sharding():
    """A key result with a given sharding (and a split inside): no key-data pin."""
    mesh = _mesh((4, 2), ("x", "y"))
    keys = jax.device_put(jax.random.split(jax.random.key(0), 8), NamedSharding(mesh, P("x")))

    def f(k):
        return k, jax.random.key_data(jax.random.split(k[0], 4))

    return jit_with(f, out_shardings=NamedSharding(mesh, P("x"))), (keys,), None


def explicit_unreduced():
    """Explicit axes: two einsums unreduced over ``y``, added, then resharded."""
    mesh = _mesh((2, 2), ("x", "y"), AxisType.Explicit)
    inp = np.arange(16.0).reshape(8, 2)
    place = lambda a, spec: jax.device_put(a, NamedSharding(mesh, spec))  # noqa: E731
    args = (place(inp, P("x", "y")), place(inp.T, P("y", None)),
            place(inp, P("x", "y")), place(inp.T, P("y", None)))

    def f(x, y, a, b):
        m1 = jnp.einsum("xy,yz->xz", x, y, out_sharding=P("x", unreduced={"y"}))
        m2 = jnp.einsum("xy,yz->xz", a, b, out_sharding=P("x", unreduced={"y"}))
        return jax.sharding.reshard(m1 + m2, P("x"))

    return f, args, mesh


def mixed_axis_types():
    """A spec over an Explicit and an Auto axis."""
    mesh = jax.make_mesh((2, 2), ("x", "y"), axis_types=(AxisType.Explicit, AxisType.Auto))
    arr = jax.device_put(np.arange(16).reshape(8, 2), NamedSharding(mesh, P(("x", "y"), None)))
    return (lambda x: x * 2), (arr,), mesh


def scalar_arguments():
    """Scalars given without a sharding beside a sharded array: jax pins each it keeps
    replicated on the empty mesh (declared after the mesh the array names first)."""
    mesh = _mesh((8,), ("x",))
    x = jax.device_put(jnp.arange(16.0), NamedSharding(mesh, P("x")))

    def f(x, a, b, unused, c):
        return x * a + b, c + 1

    return f, (x, 2.0, jnp.float32(3), 4.0, np.int32(5)), None


def scalar_argument_given_out_sharding():
    """A scalar argument before the only mesh, a result's: its empty mesh comes first."""
    mesh = _mesh((8,), ("x",))
    return jit_with(lambda a: a + 1, out_shardings=NamedSharding(mesh, P())), (2.0,), None


def unused_typed_key():
    """A typed PRNG key the program never reads, on one device: jax's lowering
    constrains a key's data whether read or not, and jax.jit prunes the key before."""
    return (lambda key, x: x + 1), (jax.random.key(0), np.ones(4, np.float32)), None


class jit_with:
    """A function with the options both jits are given."""

    def __init__(self, fun, **options):
        self.fun, self.options = fun, options


PROGRAMS = {f.__name__: f for f in (unconstrained_dims, shard_map_partial_auto, prng_keys,
                                    prng_keys_given_out_sharding, explicit_unreduced,
                                    mixed_axis_types, scalar_arguments,
                                    scalar_argument_given_out_sharding, unused_typed_key)}
ZOO_PROGRAMS = ("lm_linen_unconstrained", "pipeline_shard_map", "dropout_cond", "moe")


def both(name):
    """(jax.jit's Lowered, shardc's Lowered) of one program."""
    fun, args, mesh = PROGRAMS[name]()
    options = {}
    if isinstance(fun, jit_with):
        fun, options = fun.fun, fun.options
    with jax.set_mesh(mesh) if mesh is not None else contextlib.nullcontext():
        return jax.jit(fun, **options).lower(*args), jit(fun, **options).lower(*args)


@pytest.mark.parametrize("name", list(PROGRAMS))
def test_as_text_is_jax_jits(name):
    theirs, ours = both(name)
    assert ours.as_text() == theirs.as_text()
    assert str(ours.compiler_ir()) == str(theirs.compiler_ir())


@pytest.mark.parametrize("name", ZOO_PROGRAMS)
def test_zoo_as_text_is_jax_jits(name):
    program = ZOO[name]("small")
    context = jax.set_mesh(program.mesh) if program.mesh_context else contextlib.nullcontext()
    options = dict(in_shardings=program.in_shardings, out_shardings=program.out_shardings,
                   donate_argnums=program.donate_argnums)
    with context:
        theirs = jax.jit(program.fun, **options).lower(*program.args)
        ours = jit(program.fun, **options).lower(*program.args)
    assert ours.as_text() == theirs.as_text()


def test_the_texts_the_peer_tests_read():
    """What pjit_test / shard_map_test look for in the lowered text."""
    assert '<@mesh, [{?}, {"y"}, {}]>' in both("unconstrained_dims")[1].as_text()
    assert ('in_shardings=[<@mesh, [{"i", ?}, {?}]>] out_shardings=[<@mesh, [{"i", ?}, {?}]>]'
            ' manual_axes={"i"}') in both("shard_map_partial_auto")[1].as_text()
    assert "<@empty_mesh, [{?}, {?}, {}]>" in both("prng_keys")[1].as_text()
    assert both("explicit_unreduced")[1].as_text().count('unreduced={"y"}') == 3
    text = both("mixed_axis_types")[1].as_text()
    assert text.count("{?}") == 2 and text.count('{"x", ?}') == 2


def test_propagated_text_is_the_module_it_compiles():
    fun, (v,), mesh = PROGRAMS["shard_map_partial_auto"]()
    jitted = jit(fun)
    ours, hit = jitted.lower(v), jitted.lower(v)
    propagated = ours.as_text(propagated=True)
    assert ours.compiler_ir(propagated=True) is ours.module
    assert propagated == ours.module.operation.get_asm()
    assert "sharding_per_value" in propagated and "sharding_per_value" not in ours.as_text()
    # Each Lowered has its own copy of the module as lowered; a cache hit prints the same.
    assert hit.compiler_ir() is not ours.compiler_ir()
    assert hit.as_text() == ours.as_text()
    expected = jax.jit(fun)(v)
    got = ours.compile()(v)
    np.testing.assert_array_equal(np.asarray(got), np.asarray(expected))
    assert got.sharding == expected.sharding


def test_without_propagation_both_texts_are_the_module():
    fun, args, _ = PROGRAMS["unconstrained_dims"]()
    lowered = jit(fun).lower(*args, propagate=False)
    assert lowered.compiler_ir() is lowered.module
    assert lowered.as_text() == lowered.as_text(propagated=True)
    assert lowered.as_text() == jax.jit(fun).lower(*args).as_text()
