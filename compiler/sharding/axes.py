"""Axis references and sub-axes as pure-Python values (spec section 1.2).

An ``AxisRef`` names a mesh axis or a sub-axis of it: ``(name, pre, size,
total)`` where the full axis is ``(name, 1, n, n)`` and the sub-axis
``"x":(m)k`` is ``(name, m, k, n)``. Think of it as the half-open interval
``[pre, pre*size)`` on the multiplicative scale of its axis; every predicate
below is interval arithmetic on that picture. Values are plain named tuples:
hashable, cheap to compare, and ordered like Shardy orders axis refs within
one name (``"x":(1)2 < "x" < "x":(2)2``).
"""

from __future__ import annotations

from collections.abc import Sequence
from math import gcd
from typing import NamedTuple


class AxisRef(NamedTuple):
    """A full mesh axis (``pre == 1 and size == total``) or a sub-axis of it."""

    name: str
    pre: int
    size: int
    total: int

    @property
    def next(self) -> int:
        """The pre-size of the sub-axis that would follow this one."""
        return self.pre * self.size


    def __str__(self) -> str:
        if self.size == self.total:
            return f'"{self.name}"'
        return f'"{self.name}":({self.pre}){self.size}'


def full_axis(name: str, size: int) -> AxisRef:
    """Return the ref to the whole axis ``name`` of ``size``."""
    return AxisRef(name, 1, size, size)


def sub_axis(name: str, pre: int, size: int, total: int) -> AxisRef:
    """Return ``"name":(pre)size``, or the full axis when it covers all of it."""
    return AxisRef(name, pre, size, total)


def contains(a: AxisRef, b: AxisRef) -> bool:
    """Whether ``a`` covers ``b`` (a full axis covers all of its sub-axes)."""
    return a[0] == b[0] and a[1] <= b[1] and b[1] * b[2] <= a[1] * a[2]


def prefix_of(a: AxisRef, b: AxisRef) -> bool:
    """Whether ``a`` is contained in ``b`` and starts where ``b`` starts."""
    return a[0] == b[0] and a[1] == b[1] and a[2] <= b[2]


def suffix_of(a: AxisRef, b: AxisRef) -> bool:
    """Whether ``a`` is contained in ``b`` and ends where ``b`` ends."""
    return contains(b, a) and a[1] * a[2] == b[1] * b[2]


def overlaps(a: AxisRef, b: AxisRef) -> bool:
    """Whether ``a`` and ``b`` share part of one axis (a full axis overlaps any ref of it).

    The "full" case is not implied by the interval test: a size-1 axis spans
    the empty interval [1, 1), yet using it twice is a duplicate axis.
    """
    if a[0] != b[0]:
        return False
    if a[2] == a[3] or b[2] == b[3]:
        return True
    return a[1] < b[1] * b[2] and b[1] < a[1] * a[2]


def can_coexist(a: AxisRef, b: AxisRef) -> bool:
    """Whether both refs can be used in one sharding (Shardy's canCoexist)."""
    if a[0] != b[0] or a[2] == a[3] or b[2] == b[3]:
        return True
    lo, hi = min(a[1], b[1]), max(a[1], b[1])
    a_next, b_next = a[1] * a[2], b[1] * b[2]
    lo_next, hi_next = min(a_next, b_next), max(a_next, b_next)
    if lo_next > hi:
        return lo_next % hi == 0 and hi % lo == 0 and hi_next % lo_next == 0
    return hi % lo_next == 0


def prefix_without_overlap(a: AxisRef, b: AxisRef) -> AxisRef | None:
    """The largest prefix of ``a`` that does not overlap ``b`` (None if empty)."""
    if a[0] != b[0]:
        return a
    if not can_coexist(a, b):
        return None
    if not overlaps(a, b):
        return a
    if a[1] >= b[1]:
        return None
    return AxisRef(a[0], a[1], b[1] // a[1], a[3])


def prefix_without_overlap_all(a: AxisRef | None, others: Sequence[AxisRef]) -> AxisRef | None:
    """Fold ``prefix_without_overlap`` over ``others``; None as soon as one step is."""
    for other in others:
        if a is None:
            return None
        if other[0] == a[0]:
            a = prefix_without_overlap(a, other)
    return a


def greatest_common_prefix(a: AxisRef, b: AxisRef) -> AxisRef | None:
    """The longer of two refs when one is a prefix of the other, else None."""
    if not can_coexist(a, b):
        return None
    if prefix_of(a, b):
        return a
    if prefix_of(b, a):
        return b
    return None


def greatest_common_prefix_list(
    first: Sequence[AxisRef], second: Sequence[AxisRef]
) -> tuple[AxisRef, ...]:
    """Walk both lists in lock-step; keep equal refs, then the ref-level prefix."""
    out: list[AxisRef] = []
    for a, b in zip(first, second):
        if a == b:
            out.append(a)
            continue
        common = greatest_common_prefix(a, b)
        if common is not None:
            out.append(common)
        break
    return tuple(out)


def can_merge(a: AxisRef, b: AxisRef) -> bool:
    """Whether ``b`` is the sub-axis right after sub-axis ``a`` of the same axis."""
    return (
        a[0] == b[0] and a[2] != a[3] and b[2] != b[3] and a[1] * a[2] == b[1]
    )


def merge(a: AxisRef, b: AxisRef) -> AxisRef:
    """Merge two consecutive sub-axes (the full axis if they cover it)."""
    return AxisRef(a[0], a[1], a[2] * b[2], a[3])


def add_axis_or_merge(axes: list[AxisRef], axis: AxisRef) -> None:
    """Append ``axis``, merging it into the last element when they are consecutive."""
    if axes and can_merge(axes[-1], axis):
        axes[-1] = merge(axes[-1], axis)
    else:
        axes.append(axis)


def is_strict_prefix(first: Sequence[AxisRef], second: Sequence[AxisRef]) -> bool:
    """Whether ``first`` is a strict prefix of ``second`` (last ref may be a prefix)."""
    n = len(first)
    if n == 0:
        return len(second) > 0
    if n > len(second):
        return False
    for i in range(n - 1):
        if first[i] != second[i]:
            return False
    last, other = first[n - 1], second[n - 1]
    if n == len(second) and last == other:
        return False
    return prefix_of(last, other)


def mesh_sort_key(order: dict[str, int]):
    """Key ordering refs by mesh axis order, then as refs of one name compare."""
    return lambda a: (order.get(a[0], len(order)), a[0], a[1], a[2])


def size_product(axes: Sequence[AxisRef]) -> int:
    """The product of the sizes of ``axes``."""
    product = 1
    for axis in axes:
        product *= axis[2]
    return product


__all__ = [
    "AxisRef",
    "add_axis_or_merge",
    "can_coexist",
    "can_merge",
    "contains",
    "full_axis",
    "gcd",
    "greatest_common_prefix",
    "greatest_common_prefix_list",
    "is_strict_prefix",
    "merge",
    "mesh_sort_key",
    "overlaps",
    "prefix_of",
    "prefix_without_overlap",
    "prefix_without_overlap_all",
    "size_product",
    "sub_axis",
    "suffix_of",
]
