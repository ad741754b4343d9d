"""The jax <-> sdy sharding bridge, with ``jax.jit`` as the oracle for the text we write."""

import functools
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import AxisType, Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from shardc.compiler import jit as shardc_jit

# These tests check what lowering writes; propagation has its own tests.
jit = functools.partial(shardc_jit, propagate=False)
from jaxlib.mlir import ir

from shardc.dialects import make_context, sdy
from shardc.dialects.errors import (
    DuplicateAxisError,
    NoPartitionSpecFormError,
    RankMismatchError,
    ShardingError,
    UnknownAxisError,
)

AUTO2 = (AxisType.Auto,) * 2
U = P.UNCONSTRAINED


def auto_mesh(shape, names):
    return jax.make_mesh(shape, names, axis_types=(AxisType.Auto,) * len(names))


def reversed_mesh():
    return Mesh(np.array(jax.devices()[::-1]).reshape(2, 4), ("a", "b"), axis_types=AUTO2)


MESHES = {
    "4x2": lambda: auto_mesh((4, 2), ("x", "y")),
    "8": lambda: auto_mesh((8,), ("d",)),
    "2x2x2": lambda: auto_mesh((2, 2, 2), ("a", "b", "c")),
    "4x2x1": lambda: auto_mesh((4, 2, 1), ("x", "y", "z")),
    "2x4-reversed": reversed_mesh,
}

# (mesh, spec, shape): at least 25 combinations the oracle must agree on.
CASES = [
    ("4x2", P(), (8, 4)),
    ("4x2", P(None), (8, 4)),
    ("4x2", P(None, None), (8, 4)),
    ("4x2", P("x"), (8, 4)),
    ("4x2", P("x", None), (8, 4)),
    ("4x2", P("y"), (8, 4)),
    ("4x2", P("x", "y"), (8, 4)),
    ("4x2", P("y", "x"), (8, 4)),
    ("4x2", P(("x", "y")), (8, 4)),
    ("4x2", P(("y", "x")), (8, 4)),
    ("4x2", P(None, "x"), (8, 4)),
    ("4x2", P(None, ("y", "x")), (8, 8)),
    ("4x2", P("x"), (8, 4, 2)),
    ("4x2", P(None, None, "y"), (8, 4, 2)),
    ("4x2", P(), ()),
    ("8", P("d"), (16,)),
    ("8", P(None, "d"), (2, 16)),
    ("8", P(), (3, 5)),
    ("2x2x2", P("a", "b", "c"), (2, 4, 8)),
    ("2x2x2", P(("c", "a"), "b"), (4, 4)),
    ("2x2x2", P(("a", "b", "c")), (8,)),
    ("2x2x2", P(None, ("b", "c")), (3, 4)),
    ("4x2x1", P(("x", "z")), (8, 2)),
    ("4x2x1", P("z", "y"), (3, 2)),
    ("2x4-reversed", P("a", "b"), (4, 8)),
    ("2x4-reversed", P("b"), (8, 8)),
]


def jax_arg_sharding(text: str) -> str:
    match = re.search(r"%arg0: [^{]*\{[^}]*?sdy\.sharding = (#sdy\.sharding<.*?\]>)", text)
    assert match, text
    return match.group(1)


def jax_mesh_op(text: str) -> str:
    return re.search(r"sdy\.mesh @mesh = (<\[.*?\]>)", text).group(1)


@pytest.mark.parametrize("mesh_name,spec,shape", CASES, ids=lambda c: str(c))
def test_argument_sharding_matches_jax(mesh_name, spec, shape):
    mesh = MESHES[mesh_name]()
    sharding = NamedSharding(mesh, spec)
    x = jax.ShapeDtypeStruct(shape, jnp.float32)
    expected = jax.jit(lambda a: a + 1, in_shardings=sharding).lower(x).as_text()
    ours = jit(lambda a: a + 1, in_shardings=sharding).lower(x).as_text()
    assert jax_arg_sharding(ours) == jax_arg_sharding(expected)
    assert jax_mesh_op(ours) == jax_mesh_op(expected)
    assert "mhlo.num_partitions = 8 : i32" in ours


@pytest.mark.parametrize("mesh_name,spec,shape", CASES, ids=lambda c: str(c))
def test_round_trip_is_identity(mesh_name, spec, shape):
    mesh = MESHES[mesh_name]()
    with make_context():
        attr = sdy.sharding_attr(spec, mesh, len(shape), mesh_symbol="mesh")
        back = sdy.named_sharding_from_attr(attr, mesh)
        again = sdy.sharding_attr(back.spec, mesh, len(shape), mesh_symbol="mesh")
    assert back.is_equivalent_to(NamedSharding(mesh, spec), len(shape))
    assert again == attr
    written_canonically = not (sdy.spec_dims(spec) and sdy.spec_dims(spec)[-1] is None)
    if written_canonically:
        assert back.spec == spec


def test_unconstrained_dims_are_open_and_round_trip():
    mesh = MESHES["4x2"]()
    with make_context():
        attr = sdy.sharding_attr(P(U, "y"), mesh, 3, mesh_symbol="mesh")
        assert str(attr) == '#sdy.sharding<@mesh, [{?}, {"y"}, {}]>'
        assert sdy.partition_spec_from_attr(attr) == P(U, "y")


def test_unreduced_axes_are_in_mesh_order():
    mesh = jax.make_mesh((4, 2), ("x", "y"), axis_types=(AxisType.Explicit,) * 2)
    with make_context():
        attr = sdy.sharding_attr(P(unreduced={"y", "x"}), mesh, 2, mesh_symbol="mesh")
        assert str(attr) == '#sdy.sharding<@mesh, [{}, {}], unreduced={"x", "y"}>'
        assert sdy.partition_spec_from_attr(attr) == P(unreduced={"x", "y"})


def test_modify_wrt_axis_types_opens_dims_and_lists_explicit_axes_as_replicated():
    mesh = jax.make_mesh((4, 2), ("x", "y"), axis_types=(AxisType.Auto, AxisType.Explicit))
    with make_context():
        attr = sdy.sharding_attr(P("x"), mesh, 2, mesh_symbol="m", modify_wrt_axis_types=True)
    assert str(attr) == '#sdy.sharding<@m, [{"x", ?}, {?}], replicated={"y"}>'


def test_inline_mesh_when_no_symbol_is_given():
    with make_context():
        attr = sdy.sharding_attr(P("x"), MESHES["4x2"](), 1)
    assert str(attr) == '#sdy.sharding<mesh<["x"=4, "y"=2]>, [{"x"}]>'


def test_mesh_attrs():
    with make_context():
        assert str(sdy.mesh_attr(MESHES["4x2"]())) == '#sdy.mesh<["x"=4, "y"=2]>'
        assert str(sdy.mesh_attr(MESHES["4x2"]().abstract_mesh)) == '#sdy.mesh<["x"=4, "y"=2]>'
        reversed_attr = sdy.mesh_attr(reversed_mesh())
        assert str(reversed_attr) == (
            '#sdy.mesh<["a"=2, "b"=4], device_ids=[7, 6, 5, 4, 3, 2, 1, 0]>'
        )
        assert str(sdy.mesh_attr(reversed_mesh(), with_device_ids=False)) == (
            '#sdy.mesh<["a"=2, "b"=4]>'
        )
        assert str(sdy.maximal_mesh_attr(3)) == "#sdy.mesh<[], device_ids=[3]>"
        empty = jax.sharding.AbstractMesh((), ())
        assert str(sdy.mesh_attr(empty)) == "#sdy.mesh<[]>"


def test_mesh_round_trip_keeps_device_order():
    with make_context():
        mesh = reversed_mesh()
        back = sdy.mesh_from_attr(sdy.mesh_attr(mesh), jax.devices())
        assert back.devices.tolist() == mesh.devices.tolist()
        assert back.axis_names == mesh.axis_names
        abstract = sdy.mesh_from_attr(sdy.mesh_attr(mesh))
        assert abstract.axis_sizes == (2, 4) and abstract.axis_names == ("a", "b")


def test_mesh_on_a_device_subset_is_iota():
    mesh = Mesh(np.array(jax.devices()[4:]), ("d",))
    assert sdy.logical_device_ids(mesh) is None


@pytest.mark.parametrize(
    "spec,error,words",
    [
        (P("z"), UnknownAxisError, ["'z'", "'x', 'y'"]),
        (P("x", "x"), DuplicateAxisError, ["'x'", "more than once"]),
        (P(("x", "y"), "y"), DuplicateAxisError, ["'y'"]),
        (P("x", None, None), RankMismatchError, ["3 entries", "rank 2"]),
        (P(unreduced={"w"}), UnknownAxisError, ["'w'"]),
        (P(3), ShardingError, ["3", "not an axis name"]),
    ],
)
def test_invalid_specs_raise_errors_naming_the_culprit(spec, error, words):
    with make_context(), pytest.raises(error) as info:
        sdy.sharding_attr(spec, MESHES["4x2"](), 2)
    for word in words:
        assert word in str(info.value)
    assert isinstance(info.value, ValueError)


@pytest.mark.parametrize(
    "text,words",
    [
        ('#sdy.sharding<@mesh, [{"x":(1)2}, {}]>', ["sub-axis", '"x":(1)2']),
        ('#sdy.sharding<@mesh, [{"x"}p1, {}]>', ["priority"]),
        ('#sdy.sharding<@mesh, [{"x", ?}, {}]>', ["open dimension"]),
        ('#sdy.sharding<@mesh, [{?}, {}], replicated={"y"}>', ["replicated"]),
    ],
)
def test_shardings_without_partition_spec_form_raise(text, words):
    with make_context():
        attr = ir.Attribute.parse(text)
        with pytest.raises(NoPartitionSpecFormError) as info:
            sdy.partition_spec_from_attr(attr)
    for word in words:
        assert word in str(info.value)


def test_closed_replicated_axes_are_implied_and_dropped():
    with make_context():
        attr = ir.Attribute.parse('#sdy.sharding<@mesh, [{"x"}, {}], replicated={"y"}>')
        assert sdy.partition_spec_from_attr(attr) == P("x")


def test_inline_mesh_must_match_the_given_mesh():
    with make_context():
        attr = ir.Attribute.parse('#sdy.sharding<mesh<["x"=8]>, [{"x"}]>')
        with pytest.raises(ShardingError, match="not on"):
            sdy.named_sharding_from_attr(attr, MESHES["4x2"]())
