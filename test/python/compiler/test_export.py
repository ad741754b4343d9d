"""``jax.export`` of shardc-jitted functions, compared with the same export of ``jax.jit``.

The ``Exported`` must carry shardc's module (the Shardy attributes XLA compiles)
and shardc's shardings, survive ``serialize`` / ``deserialize``, and run the
same numbers as jax.jit's export, called directly and inside shardc's jit.
"""

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import export
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P

from bench import e2e_measure, models
from shardc.compiler import jit
from shardc.compiler.export import partition_count
from shardc.runtime import collectives

AUTO = AxisType.Auto


def mesh_4x2():
    return jax.make_mesh((4, 2), ("x", "y"), axis_types=(AUTO, AUTO))


def matmul_sin(x, w):
    return jnp.sin(x @ w) * 2


def sharded_inputs(mesh):
    x = jax.device_put(np.arange(32, dtype=np.float32).reshape(8, 4) / 7,
                       NamedSharding(mesh, P("x", None)))
    w = jax.device_put(np.linspace(-1, 1, 24, dtype=np.float32).reshape(4, 6),
                       NamedSharding(mesh, P()))
    return x, w


def exports(fun, *specs, platforms=None, **jit_options):
    """The export of ``fun`` through jax.jit and through shardc's jit."""
    return tuple(export.export(j(fun, **jit_options), platforms=platforms)(*specs)
                 for j in (jax.jit, jit))


def matmul_shardings(mesh):
    """``jit``'s shardings of ``matmul_sin``: rows over "x" in, a 2-d tiling out."""
    return dict(in_shardings=(NamedSharding(mesh, P("x")), None),
                out_shardings=NamedSharding(mesh, P("x", "y")))


def specs():
    return (jax.ShapeDtypeStruct((8, 4), jnp.float32),
            jax.ShapeDtypeStruct((4, 6), jnp.float32))


def test_export_carries_shardcs_shardings_and_module():
    mesh = mesh_4x2()
    options = matmul_shardings(mesh)
    theirs, ours = exports(matmul_sin, *specs(), **options)
    assert ours.in_shardings_hlo == theirs.in_shardings_hlo
    assert ours.out_shardings_hlo == theirs.out_shardings_hlo
    assert ours._in_named_shardings == theirs._in_named_shardings
    assert ours._out_named_shardings == theirs._out_named_shardings
    assert ours.in_shardings_jax(mesh) == theirs.in_shardings_jax(mesh)
    assert ours.out_shardings_jax(mesh) == theirs.out_shardings_jax(mesh)
    assert (ours.nr_devices, ours.platforms, ours.in_avals, ours.out_avals) == (
        theirs.nr_devices, theirs.platforms, theirs.in_avals, theirs.out_avals)
    # The module is shardc's: propagated, every op's sharding decided.
    text = ours.mlir_module()
    assert "sdy.sharding_per_value" in text
    assert 'sdy.sharding = #sdy.sharding<@mesh, [{"x"}, {}]>' in text
    lowered = jit(matmul_sin, **options).lower(*specs())
    assert partition_count(lowered.module) == ours.nr_devices == 8


def test_serialized_round_trip_runs_as_jax_jits_export():
    mesh = mesh_4x2()
    options = matmul_shardings(mesh)
    theirs, ours = exports(matmul_sin, *specs(), **options)
    restored = export.deserialize(ours.serialize())
    assert restored.mlir_module() == ours.mlir_module()
    assert restored._out_named_shardings == theirs._out_named_shardings
    x, w = sharded_inputs(mesh)
    got, want = restored.call(x, w), theirs.call(x, w)
    np.testing.assert_allclose(got, want, rtol=1e-6)
    assert got.sharding == want.sharding


def test_exported_called_inside_shardc_jit():
    mesh = mesh_4x2()
    options = matmul_shardings(mesh)
    _, ours = exports(matmul_sin, *specs(), **options)
    restored = export.deserialize(ours.serialize())
    x, w = sharded_inputs(mesh)

    def caller(x, w):
        return restored.call(x, w) + 1

    out_sharding = NamedSharding(mesh, P("x"))
    got = jit(caller, out_shardings=out_sharding)(x, w)
    want = jax.jit(caller, out_shardings=out_sharding)(x, w)
    np.testing.assert_allclose(got, want, rtol=1e-6)
    assert got.sharding == want.sharding


def test_symbolic_shapes_and_several_platforms():
    b = export.symbolic_shape("b")[0]
    poly = (jax.ShapeDtypeStruct((b, 4), jnp.float32), jax.ShapeDtypeStruct((4, 6), jnp.float32))
    theirs, ours = exports(matmul_sin, *poly, platforms=("cpu", "tpu"))
    assert ours.platforms == theirs.platforms == ("cpu", "tpu")
    assert ours.in_avals == theirs.in_avals
    assert ours.uses_global_constants and theirs.uses_global_constants
    restored = export.deserialize(ours.serialize())
    x, w = np.ones((3, 4), np.float32), np.ones((4, 6), np.float32)
    np.testing.assert_allclose(restored.call(x, w), theirs.call(x, w), rtol=1e-6)
    # Inside shardc's jit the symbolic shapes are refined to the static ones.
    x5 = np.arange(20, dtype=np.float32).reshape(5, 4)
    np.testing.assert_allclose(jit(restored.call)(x5, w), jax.jit(theirs.call)(x5, w),
                               rtol=1e-6)


def test_export_refuses_host_callbacks_as_jax():
    def with_callback(x):
        jax.debug.print("x={x}", x=x)
        return x * 2

    spec = jax.ShapeDtypeStruct((4,), jnp.float32)
    for j in (jax.jit, jit):
        with pytest.raises(NotImplementedError, match="host_callbacks"):
            export.export(j(with_callback))(spec)


class TestStages:
    """The jax.stages surface jax's own code and libraries read."""

    def test_compile_takes_compiler_options_as_jax(self):
        mesh = mesh_4x2()
        x, w = sharded_inputs(mesh)
        lowered = jit(matmul_sin).lower(x, w)
        for compiled in (lowered.compile(None), lowered.compile(compiler_options=None),
                         lowered.compile({"xla_embed_ir_in_executable": True})):
            np.testing.assert_allclose(compiled(x, w), jax.jit(matmul_sin)(x, w), rtol=1e-6)
        for stage in (jax.jit(matmul_sin).lower(x, w), lowered):
            with pytest.raises(jax.errors.JaxRuntimeError, match="No such compile option"):
                stage.compile({"not_an_option": 1})

    def test_lowering_compile_args_as_jax(self):
        mesh = mesh_4x2()
        x, w = sharded_inputs(mesh)
        sharding = NamedSharding(mesh, P("x", "y"))
        theirs = jax.jit(matmul_sin, out_shardings=sharding).lower(x, w)._lowering
        ours = jit(matmul_sin, out_shardings=sharding).lower(x, w)._lowering
        assert set(ours.compile_args) == set(theirs.compile_args)
        assert ours.const_args == theirs.const_args == []
        assert ours.compile_args["out_shardings"] == theirs.compile_args["out_shardings"]
        assert ours.compile_args["num_devices"] == theirs.compile_args["num_devices"]
        assert "sdy.sharding_per_value" in str(ours.stablehlo())

    def test_traced_surface(self):
        x, w = jnp.ones((8, 4)), jnp.ones((4, 6))
        theirs = jax.jit(matmul_sin, donate_argnums=1).trace(x, w)
        ours = jit(matmul_sin, donate_argnums=1).trace(x, w)
        assert ours.args_info == theirs.args_info
        assert ours.out_avals == theirs.out_avals

    def test_compiled_call_errors_as_jax(self):
        x, w = jnp.ones((8, 4)), jnp.ones((4, 6))
        for j in (jax.jit, jit):
            compiled = j(matmul_sin).lower(x, w).compile()
            with pytest.raises(TypeError, match=r"There are 1 mismatches, including:\n"
                               r"    \* at args, seen tuple of length 2 but now given "
                               r"tuple of length 1"):
                compiled(x)
            with pytest.raises(TypeError, match="Cannot apply JAX transformations to a "
                               "function lowered and compiled"):
                jax.grad(lambda a: compiled(a, w).sum())(x)


def test_exported_for_several_devices_called_with_jits_shardings():
    # jax checks the Exported's device count against the lowering's: the
    # shardings given to shardc's jit (not the arguments) make it eight.
    mesh = mesh_4x2()
    options = matmul_shardings(mesh)
    theirs, ours = exports(matmul_sin, *specs(), **options)
    x = np.arange(32, dtype=np.float32).reshape(8, 4) / 7
    w = np.linspace(-1, 1, 24, dtype=np.float32).reshape(4, 6)
    replicated = NamedSharding(mesh, P())
    got = jit(ours.call, in_shardings=(replicated, replicated))(x, w)
    want = jax.jit(theirs.call, in_shardings=(replicated, replicated))(x, w)
    np.testing.assert_allclose(got, want, rtol=1e-6)
    assert got.sharding == want.sharding


def test_sharded_export_for_several_platforms():
    def per_platform(x, w):
        offset = jax.lax.platform_dependent(x, cpu=jnp.sum, tpu=jnp.mean)
        return jnp.linalg.norm(jnp.sin(x @ w), axis=1) + offset

    mesh = mesh_4x2()
    options = dict(in_shardings=(NamedSharding(mesh, P("x")), None),
                   out_shardings=NamedSharding(mesh, P("x")))
    theirs, ours = exports(per_platform, *specs(), platforms=("cpu", "tpu"), **options)
    assert ours.platforms == theirs.platforms == ("cpu", "tpu")
    assert ours._in_named_shardings == theirs._in_named_shardings
    assert ours._out_named_shardings == theirs._out_named_shardings
    restored = export.deserialize(ours.serialize())
    x, w = sharded_inputs(mesh)
    got, want = restored.call(x, w), theirs.call(x, w)
    np.testing.assert_allclose(got, want, rtol=1e-6)
    assert got.sharding == want.sharding
    np.testing.assert_allclose(jit(restored.call)(x, w), want, rtol=1e-6)


def test_exported_on_one_mesh_called_on_another_of_as_many_devices():
    devices = jax.devices()[:2]
    export_mesh = jax.sharding.Mesh(devices, ("x",))
    options = dict(in_shardings=NamedSharding(export_mesh, P("x", None)),
                   out_shardings=NamedSharding(export_mesh, P(None, "x")))
    spec = jax.ShapeDtypeStruct((16, 4), jnp.float32)
    theirs, ours = exports(lambda b: b * 2.0, spec, **options)
    restored = export.deserialize(ours.serialize())
    run_mesh = jax.sharding.Mesh(devices[::-1], ("y",))
    a = jax.device_put(np.arange(64, dtype=np.float32).reshape(16, 4),
                       NamedSharding(run_mesh, P()))
    got, want = jit(restored.call)(a), jax.jit(theirs.call)(a)
    np.testing.assert_array_equal(got, want)
    assert got.sharding.is_equivalent_to(want.sharding, 2)
    # The Exported's own mesh keeps its name @mesh, the run mesh comes after it, as
    # jax.jit names them.
    text = jit(restored.call).lower(a).as_text()
    jax_text = jax.jit(theirs.call).lower(a).as_text()
    assert mesh_symbols(text) == mesh_symbols(jax_text) == [
        ("mesh", '<["x"=2]>'), ("mesh_0", '<["y"=2]>')]
    assert '#sdy.sharding<@mesh_0, [{}, {}]>' in text
    assert 'sharding_constraint %arg0 <@mesh, [{"x"}, {}]>' in text


def mesh_symbols(text):
    """The ``sdy.mesh`` symbols of a module's text, in order: (name, mesh)."""
    return re.findall(r"sdy\.mesh @(\w+) = (<[^>]*>)", text)


def test_export_of_the_cost_aware_route_compiles_as_shardcs_compile():
    """The exported module is the one XLA compiles (``module_for_xla``): the search's
    explicit reshards as constraints (XLA's import has no mesh for ``sdy.reshard``:
    "unknown mesh" when the export was called) and every op it decided constrained
    (XLA re-derives unconstrained ops from the boundaries: fsdp_train_step's
    all-reduces compiled to 65540 bytes where shardc's compile has 66052)."""
    program = models.REGISTRY["fsdp_train_step"]("small")
    jitted, args, _ = e2e_measure.prepare(program, e2e_measure.COST_AWARE)
    lowered = jitted.lower(*args)
    assert lowered.cost_aware_resolution.pins
    ours = lowered.compile()
    assert not ours.kept_shardy
    restored = export.deserialize(export.export(jitted)(*args).serialize())
    theirs = jax.jit(restored.call).lower(*args).compile()
    found = [sorted((c.kind, c.bytes_per_device) for c in collectives.find_collectives(text))
             for text in (ours.as_text(), theirs.as_text())]
    assert found[0] == found[1]
    got = jax.block_until_ready(restored.call(*args))
    want = jax.block_until_ready(ours(*args))
    for values, mine, exported in ((args, ours.input_shardings[0], theirs.input_shardings[0]),
                                   (want, ours.output_shardings, theirs.output_shardings)):
        for value, a, b in zip(*map(jax.tree.leaves, (values, mine, exported)), strict=True):
            assert a.is_equivalent_to(b, value.ndim)
    for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(want), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-6)
