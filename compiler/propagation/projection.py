"""Projecting tensor shardings onto the factors of a rule and back.

``project`` turns one tensor's dimension shardings into per-factor shardings:
a non-minor-most factor absorbs only the axes (or gcd-sized sub-axes) that
divide it, the minor-most factor of a dimension takes everything left, and
axes that cannot be split evenly become *overflow* that blocks the factors
after it. ``back_project`` rebuilds the dimension shardings from (possibly
expanded) factor shardings, merging consecutive sub-axes at factor borders;
the result carries no priorities.

A factor sharding is a small mutable list ``[axes, closed, minor_most,
overflow]`` (tuples of ``AxisRef``) indexed by the constants below; a tensor
projection is a ``TensorProjection`` with a ``factors`` dict.
"""

from __future__ import annotations

from collections.abc import Sequence
from math import gcd

from shardc.compiler.sharding.axes import AxisRef, add_axis_or_merge
from shardc.compiler.sharding.tensor import DimSharding, TensorSharding

AXES, CLOSED, MINOR_MOST, OVERFLOW = 0, 1, 2, 3

TensorMapping = tuple[tuple[int, ...], ...]


class TensorProjection:
    """One tensor's factor shardings plus its replicated and unreduced axes."""

    __slots__ = ("factors", "replicated", "unreduced")

    def __init__(self, factors: dict[int, list], replicated=(), unreduced=()):
        self.factors = factors
        self.replicated = replicated
        self.unreduced = unreduced

    def __repr__(self) -> str:
        return f"TensorProjection({self.factors}, {self.replicated}, {self.unreduced})"


def _remaining(first: AxisRef | None, axes: Sequence[AxisRef], index: int) -> list[AxisRef]:
    out: list[AxisRef] = []
    if first is None:
        return out
    add_axis_or_merge(out, first)
    for axis in axes[index + 1 :]:
        add_axis_or_merge(out, axis)
    return out


def project(
    sharding: TensorSharding | None, mapping: TensorMapping, factor_sizes: Sequence[int]
) -> TensorProjection:
    """Project ``sharding`` (None: fully open) onto the factors of ``mapping``."""
    factors: dict[int, list] = {}
    if sharding is None:
        for dim_factors in mapping:
            last = len(dim_factors) - 1
            for k, f in enumerate(dim_factors):
                factors[f] = [(), False, k == last, ()]
        return TensorProjection(factors)
    for dim_factors, dim in zip(mapping, sharding.dims):
        axes = dim.axes
        closed = dim.closed
        if len(dim_factors) == 1:
            # Most dims: one factor, the minor-most, takes every axis (merged).
            factors[dim_factors[0]] = [
                tuple(axes) if len(axes) < 2 else tuple(_remaining(axes[0], axes, 0)),
                closed, True, ()]
            continue
        index = 0
        cur = axes[0] if axes else None
        overflowed = False
        last = len(dim_factors) - 1
        for k, f in enumerate(dim_factors):
            rec = [(), closed, k == last, ()]
            factors[f] = rec
            if overflowed:
                rec[CLOSED] = True
                break
            if k == last:
                rec[AXES] = tuple(_remaining(cur, axes, index))
                break
            remaining_size = factor_sizes[f]
            taken: list[AxisRef] = []
            g = 1
            while cur is not None and (cur[2] == 1 or (g := gcd(remaining_size, cur[2])) > 1):
                if cur[2] > g:
                    taken.append(AxisRef(cur[0], cur[1], g, cur[3]))
                    cur = AxisRef(cur[0], cur[1] * g, cur[2] // g, cur[3])
                    remaining_size //= g
                else:
                    taken.append(cur)
                    remaining_size //= cur[2]
                    index += 1
                    cur = axes[index] if index < len(axes) else None
            rec[AXES] = tuple(taken)
            if remaining_size > 1 and cur is not None:
                overflowed = True
                rec[OVERFLOW] = tuple(_remaining(cur, axes, index))
    return TensorProjection(factors, sharding.replicated, sharding.unreduced)


def projected_axes(sharding: TensorSharding | None, mapping: TensorMapping,
                   factor_sizes: Sequence[int]) -> dict[int, tuple[AxisRef, ...]]:
    """Each factor's axes in ``sharding`` (``project`` read for its axes alone)."""
    return {f: tuple(record[AXES])
            for f, record in project(sharding, mapping, factor_sizes).factors.items()}


def _size(axes: Sequence[AxisRef]) -> int:
    product = 1
    for axis in axes:
        product *= axis[2]
    return product


def back_project(
    proj: TensorProjection,
    mapping: TensorMapping,
    factor_sizes: Sequence[int],
    mesh: str,
) -> TensorSharding:
    """Rebuild the tensor sharding from ``proj`` (no priorities, on ``mesh``)."""
    dims = []
    factors = proj.factors
    for dim_factors in mapping:
        closed = False
        out: list[AxisRef] = []
        for f in dim_factors:
            rec = factors[f]
            closed |= rec[CLOSED]
            axes = rec[AXES]
            if axes:
                add_axis_or_merge(out, axes[0])
                out.extend(axes[1:])
            overflow = rec[OVERFLOW]
            if overflow:
                add_axis_or_merge(out, overflow[0])
                out.extend(overflow[1:])
                break
            if _size(axes) < factor_sizes[f]:
                break
        dims.append(DimSharding(tuple(out), closed))
    return TensorSharding(mesh, tuple(dims), tuple(proj.replicated), tuple(proj.unreduced))
