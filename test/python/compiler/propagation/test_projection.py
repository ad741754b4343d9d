"""Projection onto factors and back, and both factor strategies."""

from shardc.compiler.propagation.directions import (
    BACKWARD,
    BOTH,
    FORWARD,
    NONE,
    intersection,
    union,
)
from shardc.compiler.propagation.factor_propagation import (
    aggressive_factor_propagation,
    basic_factor_propagation,
    compatible_major_axes,
)
from shardc.compiler.propagation.projection import AXES, OVERFLOW, back_project, project
from shardc.compiler.sharding.axes import AxisRef
from shardc.compiler.sharding.tensor import (
    DimSharding,
    TensorSharding,
    format_sharding,
    parse_mesh,
    parse_sharding,
)

X = AxisRef("x", 1, 4, 4)
MESHES = {"m": parse_mesh("m", '#sdy.mesh<["x"=4, "y"=2]>')}


def test_parse_and_format_round_trip():
    text = '#sdy.sharding<@m, [{"x":(1)2, ?}p1, {}], replicated={"y"}>'
    sharding = parse_sharding(text, MESHES)
    assert sharding.dims[0] == DimSharding((AxisRef("x", 1, 2, 4),), False, 1)
    assert format_sharding(sharding) == text


def test_compound_factor_splits_axis():
    sharding = TensorSharding("m", (DimSharding((X,), True),))
    proj = project(sharding, ((0, 1),), (2, 4))
    assert proj.factors[0][AXES] == (AxisRef("x", 1, 2, 4),)
    assert proj.factors[1][AXES] == (AxisRef("x", 2, 2, 4),)
    assert back_project(proj, ((0, 1),), (2, 4), "m").dims[0].axes == (X,)


def test_non_divisible_axis_overflows():
    sharding = TensorSharding("m", (DimSharding((AxisRef("y", 1, 2, 2),), False),))
    proj = project(sharding, ((0, 1),), (3, 4))
    assert proj.factors[0][OVERFLOW] == (AxisRef("y", 1, 2, 2),)
    assert proj.factors[1][1]  # the factor after an overflow is closed


def test_direction_algebra():
    assert union(FORWARD, BACKWARD) == BOTH and intersection(FORWARD, BACKWARD) == NONE
    assert union(NONE, FORWARD) == FORWARD and intersection(BOTH, BACKWARD) == BACKWARD


def _dot(lhs_axes, rhs_axes):
    mapping_l, mapping_r, mapping_o = ((0,), (2,)), ((2,), (1,)), ((0,), (1,))
    sizes = (8, 32, 16)
    lhs = project(TensorSharding("m", tuple(DimSharding(a, False) for a in lhs_axes)), mapping_l, sizes)
    rhs = project(TensorSharding("m", tuple(DimSharding(a, False) for a in rhs_axes)), mapping_r, sizes)
    out = project(None, mapping_o, sizes)
    return [lhs, rhs], [out], sizes


def test_basic_blocks_conflict_aggressive_prefers_larger_source():
    operands, results, sizes = _dot(((X,), ()), ((), (X,)))
    assert compatible_major_axes(operands, results, 0, BOTH) == [X]
    flags = basic_factor_propagation(operands, results, sizes, lambda f: BOTH,
                                     conservative=False, elementwise=False)
    assert flags == ([False, False], [False])
    operands, results, sizes = _dot(((X,), ()), ((), (X,)))
    aggressive_factor_propagation(operands, results, sizes, lambda f: BOTH,
                                  conservative=False, elementwise=False)
    assert results[0].factors[1][AXES] == (X,) and results[0].factors[0][AXES] == ()


def test_aggressive_leaves_a_tensor_holding_the_candidate_or_more():
    y = AxisRef("y", 1, 2, 2)
    # Factor 0 of the lhs holds [x, y]; the rhs-only factor 2 is empty everywhere.
    operands, results, sizes = _dot(((X, y), ()), ((), ()))
    out = results[0]
    out.factors[0][AXES] = (X,)
    flags = aggressive_factor_propagation(operands, results, sizes, lambda f: FORWARD,
                                          conservative=False, elementwise=False)
    # The result takes y after x; the lhs, which already holds [x, y], is unchanged.
    assert flags == ([False, False], [True])
    assert out.factors[0][AXES] == (X, y) and operands[0].factors[0][AXES] == (X, y)
