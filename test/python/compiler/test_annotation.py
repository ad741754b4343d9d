"""annotation.unify_body_meshes: jax's body meshes re-pointed at shardc's symbols."""

from jaxlib.mlir import ir

from shardc.compiler import annotation
from shardc.dialects import make_context

BODY_MESHES = """
sdy.mesh @mesh = <["a"=2]>
sdy.mesh @mesh_0 = <["b"=2]>
sdy.mesh @mesh_1 = <["c"=2]>
func.func @main(%arg0: tensor<8xf32>) -> tensor<8xf32> {
  %0 = sdy.sharding_constraint %arg0 <@mesh, [{"a"}]> : tensor<8xf32>
  %1 = sdy.sharding_constraint %0 <@mesh_0, [{"b"}]> : tensor<8xf32>
  %2 = sdy.sharding_constraint %1 <@mesh_1, [{"c"}]> : tensor<8xf32>
  return %2 : tensor<8xf32>
}
"""


def test_body_meshes_swap_names_and_one_keeps_its_own():
    # shardc's symbols name mesh "b" @mesh, "a" @mesh_0 and "c" @mesh_1: jax's @mesh
    # and @mesh_0 trade names, @mesh_1 keeps its own.
    module = ir.Module.parse(BODY_MESHES, make_context())
    with module.context, ir.Location.unknown():
        meshes = {op.sym_name.value: op.mesh for op in module.body.operations
                  if op.operation.name == "sdy.mesh"}
        symbols = annotation.MeshSymbols()
        for name in ("mesh_0", "mesh", "mesh_1"):
            symbols._add(meshes[name], None)
        annotation.unify_body_meshes(module, symbols)
    text = str(module)
    assert '<@mesh_0, [{"a"}]>' in text
    assert '<@mesh, [{"b"}]>' in text
    assert '<@mesh_1, [{"c"}]>' in text
    assert 'sdy.mesh @mesh = <["b"=2]>' in text and 'sdy.mesh @mesh_0 = <["a"=2]>' in text
