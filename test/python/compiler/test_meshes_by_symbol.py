"""Which jax mesh a lowering names for each mesh symbol of its module."""

import jax
from jax.sharding import AbstractMesh, AxisType, NamedSharding
from jax.sharding import PartitionSpec as P
from jaxlib.mlir import ir

from shardc.compiler import api
from shardc.compiler.signature import LeafSignature
from shardc.dialects import make_context, sdy


def _leaf(mesh) -> LeafSignature:
    return LeafSignature("x", jax.ShapeDtypeStruct((8,), "float32"), NamedSharding(mesh, P()))


def test_a_concrete_mesh_of_the_symbols_axes_is_named_before_an_abstract_one():
    auto = (AxisType.Auto,) * 2
    concrete = jax.make_mesh((4, 2), ("x", "y"), axis_types=auto)
    other = jax.make_mesh((2, 4), ("x", "y"), axis_types=auto)
    abstract = AbstractMesh((4, 2), ("x", "y"), axis_types=auto)
    with make_context(), ir.Location.unknown():
        symbols = {"mesh": sdy.mesh_attr(concrete), "other": sdy.mesh_attr(other),
                   "none": ir.Attribute.parse('#sdy.mesh<["z"=8]>')}
        leaves = [_leaf(other), _leaf(abstract), _leaf(abstract), _leaf(concrete)]
        named = api._meshes_by_symbol(symbols, leaves, [])
        assert named[0] is concrete and named[1] is other
        assert isinstance(named[2], AbstractMesh) and named[2].axis_names == ("z",)
        # A concrete mesh among the others (the context, the body's) comes before an abstract leaf.
        named = api._meshes_by_symbol(symbols, [_leaf(abstract)], [concrete])
        assert named[0] is concrete
        # Without any concrete one, the first of those axes.
        named = api._meshes_by_symbol({"mesh": symbols["mesh"]}, [_leaf(abstract)], [])
        assert named[0] is abstract
