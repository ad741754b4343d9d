"""AUTO on meshes of Explicit axes (jax.make_mesh's default): valid typed shardings, jax.jit's numbers."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P

from bench import auto_search as auto_bench
from shardc.compiler import AUTO, jit
from shardc.compiler.auto import AutoShardingError

train_step = auto_bench.mlp_step  # a residual MLP stack's SGD step


def _mlp():
    return auto_bench.mlp_case(layers=2, d=64, hidden=256, batch=32).args


def _close(got, want):
    for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(want), strict=True):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-6)


def _specs(tree):
    return [s.spec for s in jax.tree.leaves(tree)]


def _typed(spec, ndim, explicit):
    """``spec`` as jax types it: its Explicit axes only, one entry per dimension."""
    kept = []
    for entry in tuple(spec) + (None,) * (ndim - len(spec)):
        names = tuple(n for n in (entry if isinstance(entry, tuple) else (entry,)) if n in explicit)
        kept.append(names if len(names) > 1 else (names[0] if names else None))
    return P(*kept)


def test_auto_on_jax_make_mesh_default_explicit_axes():
    mesh = jax.make_mesh((2, 4), ("data", "model"))
    assert set(mesh.axis_types) == {AxisType.Explicit}  # jax 0.10.2's default
    args = _mlp()
    lowered = jit(train_step, in_shardings=AUTO, out_shardings=AUTO, mesh=mesh).lower(*args)
    ins, outs = lowered.in_shardings[0], lowered.out_shardings
    for sharding in jax.tree.leaves((ins, outs)):
        assert isinstance(sharding, NamedSharding) and sharding.mesh == mesh
    # The same search as on the mesh's Auto form: Explicit changes the types, not the choice.
    auto_mesh = jax.make_mesh((2, 4), ("data", "model"), axis_types=(AxisType.Auto,) * 2)
    on_auto = jit(train_step, in_shardings=AUTO, out_shardings=AUTO, mesh=auto_mesh).lower(*args)
    assert _specs(on_auto.in_shardings[0]) == _specs(ins)

    got = lowered.compile()(*args)
    _close(got, jax.jit(train_step)(*args))
    # Each result is typed with its chosen sharding, as jax.jit types auto_axes' results.
    want_fn = jax.jit(jax.sharding.auto_axes(train_step, out_sharding=outs),
                      in_shardings=ins, out_shardings=outs)
    with jax.set_mesh(mesh):
        want = want_fn(*args)
    _close(got, want)
    for a, b, sharding in zip(jax.tree.leaves(got), jax.tree.leaves(want), jax.tree.leaves(outs)):
        assert a.sharding.is_equivalent_to(b.sharding, a.ndim)
        assert jax.typeof(a).sharding.spec == jax.typeof(b).sharding.spec == _typed(
            sharding.spec, a.ndim, {"data", "model"})
    # Arrays placed and typed by the choice run again without a search's surprise.
    placed = jax.device_put(args, tuple(ins))
    _close(jit(train_step, in_shardings=AUTO, out_shardings=AUTO, mesh=mesh)(*placed), got)


def _scaled_mlp(w1, w2, x, scale):
    h = jax.nn.relu(jnp.einsum("bd,df->bf", x, w1))
    y = jnp.einsum("bf,fd->bd", h, w2) * scale
    return jnp.mean(y ** 2), w1 * scale


def test_auto_on_a_mesh_of_explicit_and_auto_axes_with_a_static_argument():
    mesh = jax.make_mesh((2, 4), ("data", "model"),
                         axis_types=(AxisType.Explicit, AxisType.Auto))
    keys = jax.random.split(jax.random.key(1), 3)
    w1 = jax.random.normal(keys[0], (64, 256))
    w2 = jax.random.normal(keys[1], (256, 64))
    x = jax.random.normal(keys[2], (32, 64))
    jitted = jit(_scaled_mlp, in_shardings=AUTO, out_shardings=AUTO, static_argnums=3, mesh=mesh)
    lowered = jitted.lower(w1, w2, x, 3)
    outs = lowered.out_shardings
    got = lowered.compile()(w1, w2, x)
    want = jax.jit(_scaled_mlp, static_argnums=3)(w1, w2, x, 3)
    _close(got, want)
    for a, sharding in zip(jax.tree.leaves(got), jax.tree.leaves(outs)):
        assert sharding.mesh == mesh
        # The type names the Explicit axis only; the Auto one lies beneath it.
        assert jax.typeof(a).sharding.spec == _typed(sharding.spec, a.ndim, {"data"})
    _close(jitted(w1, w2, x, 3), want)


def test_auto_under_a_context_mesh_of_explicit_axes():
    mesh = jax.make_mesh((2, 4), ("data", "model"))
    args = _mlp()
    with jax.set_mesh(mesh):
        got = jit(train_step, in_shardings=AUTO, out_shardings=AUTO)(*args)
    _close(got, jax.jit(train_step)(*args))
    assert all(a.sharding.mesh == mesh for a in jax.tree.leaves(got))


def test_a_reshard_onto_the_explicit_axes_names_why_auto_cannot_run_it():
    mesh = jax.make_mesh((2, 4), ("data", "model"))

    def typed(w, x):
        x = jax.sharding.reshard(x, P("data", None))
        return jnp.sum((x @ w) ** 2)

    jitted = jit(typed, in_shardings=AUTO, out_shardings=AUTO, mesh=mesh)
    with pytest.raises(AutoShardingError, match=r"Explicit axes \('data', 'model'\).*reshard"):
        jitted.lower(jnp.ones((64, 128)), jnp.ones((32, 64)))


def test_auto_on_an_abstract_mesh_of_explicit_axes_plans_as_on_auto_axes():
    case = auto_bench.mlp_case(layers=2, d=256, hidden=1024, batch=256)
    args = jax.tree.map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype), case.args)
    found = []
    for kind in (AxisType.Explicit, AxisType.Auto):
        mesh = jax.sharding.AbstractMesh((16, 16), ("data", "model"), axis_types=(kind,) * 2)
        lowered = jit(train_step, in_shardings=AUTO, out_shardings=AUTO, mesh=mesh).trace(
            *args).lower(lowering_platforms=("tpu",))
        assert all(s.mesh == mesh for s in jax.tree.leaves(lowered.in_shardings))
        found.append((_specs(lowered.in_shardings), lowered.auto_report().step.seconds))
    assert found[0] == found[1]
