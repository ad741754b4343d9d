"""Axis-ref predicates on hand-picked sub-axes of x=8."""

from shardc.compiler.sharding.axes import (
    AxisRef,
    add_axis_or_merge,
    can_coexist,
    contains,
    greatest_common_prefix_list,
    is_strict_prefix,
    overlaps,
    prefix_of,
    prefix_without_overlap,
)

X = AxisRef("x", 1, 8, 8)


def sub(pre, size):
    return AxisRef("x", pre, size, 8)


def test_printing_and_order():
    assert str(X) == '"x"' and str(sub(2, 2)) == '"x":(2)2'
    assert sorted([sub(2, 2), X, sub(1, 2)]) == [sub(1, 2), X, sub(2, 2)]


def test_contains_prefix_overlap():
    assert contains(X, sub(2, 2)) and not contains(sub(1, 4), X)
    assert prefix_of(sub(1, 2), sub(1, 4)) and not prefix_of(sub(2, 2), sub(1, 4))
    assert overlaps(sub(1, 4), sub(2, 2)) and not overlaps(sub(1, 2), sub(2, 2))
    assert not overlaps(X, AxisRef("y", 1, 2, 2))


def test_can_coexist_and_prefix_without_overlap():
    assert can_coexist(sub(1, 4), sub(2, 4))
    assert not can_coexist(AxisRef("x", 1, 2, 12), AxisRef("x", 3, 2, 12))
    assert prefix_without_overlap(X, sub(2, 2)) == sub(1, 2)
    assert prefix_without_overlap(sub(2, 2), X) is None
    assert prefix_without_overlap(sub(1, 2), sub(2, 4)) == sub(1, 2)


def test_merge_and_prefix_lists():
    axes = [sub(1, 2)]
    add_axis_or_merge(axes, sub(2, 4))
    assert axes == [X]
    assert greatest_common_prefix_list([sub(1, 4)], [sub(1, 2), sub(2, 2)]) == (sub(1, 2),)
    assert is_strict_prefix((), (X,)) and not is_strict_prefix((X,), (X,))
    assert is_strict_prefix((sub(1, 2),), (sub(1, 4),))


def test_a_size_one_axis_overlaps_itself():
    # Regression (found by the property test): the interval test alone says an
    # axis of size 1 spans [1, 1) and overlaps nothing, so propagation used it
    # on two dimensions of one tensor.
    from shardc.compiler.sharding.axes import AxisRef, overlaps, prefix_without_overlap

    y = AxisRef("y", 1, 1, 1)
    assert overlaps(y, y)
    assert prefix_without_overlap(y, y) is None
