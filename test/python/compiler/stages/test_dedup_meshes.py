"""dedup_meshes: meshes over the same devices merged into one before propagation, as
XLA's Shardy round trip does, so that jit's shardings are jax.jit's."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P
from jaxlib.mlir import ir

from shardc.compiler import jit
from shardc.compiler.stages.dedup_meshes import dedup_meshes
from shardc.dialects import make_context

MESHES = """
sdy.mesh @mesh1 = <["a"=2, "b"=4]>
sdy.mesh @mesh2 = <["data"=2, "model"=4]>
sdy.mesh @mesh3 = <["devices"=8]>
sdy.mesh @mesh4 = <["x"=2, "y"=4], device_ids=[7, 1, 2, 3, 4, 5, 6, 0]>
sdy.mesh @mesh5 = <["p"=2, "q"=2, "r"=2], device_ids=[7, 1, 2, 3, 4, 5, 6, 0]>
sdy.mesh @mesh6 = <["u"=2, "v"=3]>
sdy.mesh @mesh7 = <["w"=3, "z"=2]>
func.func @main(%arg0: tensor<8x8xf32> {sdy.sharding = #sdy.sharding<@mesh2, [{"model"}, {"data", ?}]>},
                %arg1: tensor<8x8xf32> {sdy.sharding = #sdy.sharding<@mesh3, [{"devices":(2)4}, {}]>},
                %arg2: tensor<8x8xf32> {sdy.sharding = #sdy.sharding<@mesh4, [{"y"}, {}], replicated={"x"}>},
                %arg3: tensor<6xf32> {sdy.sharding = #sdy.sharding<@mesh7, [{"w"}]>})
    -> (tensor<8x8xf32> {sdy.sharding = #sdy.sharding<@mesh3, [{"devices"}, {}]>}) {
  %0 = stablehlo.add %arg0, %arg1 {sdy.sharding = #sdy.sharding_per_value<[<@mesh3, [{"devices":(1)2}, {}]>]>} : tensor<8x8xf32>
  return %0 : tensor<8x8xf32>
}
"""


def test_meshes_over_the_same_devices_become_the_main_mesh():
    module = ir.Module.parse(MESHES, make_context())
    dedup_meshes(module.operation)
    module.operation.verify()
    text = str(module)
    # One main mesh per (device count, device ids), the first with the most axes of
    # size > 1; [3, 2] cannot be named in [2, 3].
    assert [line.split(" = ")[0].strip() for line in text.splitlines() if "sdy.mesh @" in line] == [
        "sdy.mesh @mesh1", "sdy.mesh @mesh5", "sdy.mesh @mesh6", "sdy.mesh @mesh7"]
    assert '<@mesh1, [{"b"}, {"a", ?}]>' in text
    assert '<@mesh1, [{"b"}, {}]>' in text  # "devices" is {"a", "b"}: "devices":(2)4 is "b"
    assert '<@mesh5, [{"q", "r"}, {}], replicated={"p"}>' in text
    assert '<@mesh7, [{"w"}]>' in text
    assert '-> (tensor<8x8xf32> {sdy.sharding = #sdy.sharding<@mesh1, [{"a", "b"}, {}]>})' in text
    assert '<@mesh1, [{"a"}, {}]>' in text  # "devices":(1)2 is "a"


MANUAL = """
sdy.mesh @mesh = <["data"=4, "model"=2]>
sdy.mesh @mesh_0 = <["devices"=8]>
func.func @main(%arg0: tensor<8xf32>) -> tensor<8xf32> {
  %0 = sdy.manual_computation(%arg0) in_shardings=[<@mesh_0, [{"devices"}]>] out_shardings=[<@mesh_0, [{"devices"}]>] manual_axes={"devices"} (%a: tensor<1xf32>) {
    sdy.return %a : tensor<1xf32>
  } : (tensor<8xf32>) -> tensor<8xf32>
  return %0 : tensor<8xf32>
}
"""


def test_manual_axes_are_named_on_the_main_mesh():
    module = ir.Module.parse(MANUAL, make_context())
    dedup_meshes(module.operation)
    module.operation.verify()
    text = str(module)
    assert "@mesh_0" not in text
    assert 'in_shardings=[<@mesh, [{"data", "model"}]>]' in text
    assert 'manual_axes={"data", "model"}' in text


@pytest.fixture(scope="module")
def mixed():
    """Weights on a data x model mesh, a batch on a ("devices",) mesh of the same devices."""
    mesh = jax.make_mesh((4, 2), ("data", "model"), axis_types=(jax.sharding.AxisType.Auto,) * 2)
    first = NamedSharding(Mesh(np.array(jax.devices()), ("devices",)), P("devices"))
    rng = np.random.default_rng(0)

    def put(shape, sharding, dtype=np.float32):
        return jax.device_put(rng.standard_normal(shape).astype(dtype), sharding)

    return dict(
        wq=put((16, 4, 8), NamedSharding(mesh, P("data", "model"))),
        wo=put((4, 8, 16), NamedSharding(mesh, P("model", None, "data"))),
        emb=put((32, 16), NamedSharding(mesh, P("model", "data"))),
        toks=jax.device_put(rng.integers(0, 32, (8, 4)).astype(np.int32), first),
        cache=jax.device_put(np.zeros((8, 12, 4, 8), np.float32), first),
        y=put((8, 4, 16), first), first=first)


def decode(wq, wo, emb, toks, cache, first):
    x = emb[toks]
    q = jnp.einsum("BLD,DNH->BLNH", x, wq)
    cache = jax.lax.with_sharding_constraint(
        jax.lax.dynamic_update_slice(cache, q, (0, 0, 0, 0)), first)
    logits = jnp.einsum("BLNH,BSNH->BNLS", q, cache)
    o = jnp.einsum("BNLS,BSNH->BLNH", jax.nn.softmax(logits), cache)
    y = jnp.einsum("BLNH,NHD->BLD", o, wo)
    return y @ emb.T, cache


def assert_as_jax(fun, *args):
    expected = jax.tree.leaves(jax.jit(fun)(*args))
    got = jax.tree.leaves(jit(fun)(*args))
    for e, g in zip(expected, got, strict=True):
        np.testing.assert_allclose(np.asarray(g), np.asarray(e), rtol=1e-5, atol=1e-5)
        assert g.sharding.is_equivalent_to(e.sharding, e.ndim), (g.sharding, e.sharding)
        assert (g.sharding.mesh.axis_names, g.sharding.spec) == (
            e.sharding.mesh.axis_names, e.sharding.spec)


def test_jit_of_a_program_on_two_meshes_of_the_same_devices_is_jax_jits(mixed):
    # The logits' dim 0 is over all 8 devices: the batch's ("devices",) mesh is
    # the weights' mesh for propagation, as in XLA.
    m = mixed
    assert_as_jax(lambda *a: decode(*a, m["first"]), m["wq"], m["wo"], m["emb"], m["toks"],
                  m["cache"])


def test_jit_of_one_op_on_two_meshes_is_jax_jits(mixed):
    assert_as_jax(lambda y, emb: y @ emb.T, mixed["y"], mixed["emb"])
    # The ("devices",) mesh first in the module: the main mesh is still data x model.
    assert_as_jax(lambda toks, emb: jnp.tanh(emb[toks]) @ emb.T, mixed["toks"], mixed["emb"])
