"""Factor propagation strategies: which axes each factor gets.

Both strategies share the same vocabulary: ``compatible_major_axes`` (what
the tensors of a factor agree on, direction deciding who may lengthen it),
``truncate`` (cut a candidate list at the first axis a check rejects) and the
two checks of Shardy's ``BasicFactorPropagation`` (no overlap with other
factors of a tensor; fits within the factor of a tensor). A strategy is a
plain function with the signature of ``FactorPropagation`` and is passed to
the driver as an argument:

* ``basic_factor_propagation`` only propagates axes every tensor can take;
* ``aggressive_factor_propagation`` decides per tensor and resolves conflicts
  between factors by preferring the factor with the largest source tensor.

Both mutate the projections in place and return which operands and results
changed.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from math import gcd
from typing import Protocol

from shardc.compiler.propagation.directions import BACKWARD, BOTH, NONE
from shardc.compiler.propagation.projection import (
    AXES,
    CLOSED,
    MINOR_MOST,
    OVERFLOW,
    TensorProjection,
)
from shardc.compiler.sharding.axes import (
    AxisRef,
    contains,
    is_strict_prefix,
    prefix_of,
    prefix_without_overlap_all,
    size_product,
)

Check = Callable[[AxisRef, int], "AxisRef | None"]


class FactorPropagation(Protocol):
    """Expand factor shardings of one op in place; return updated flags."""

    def __call__(
        self,
        operands: list[TensorProjection],
        results: list[TensorProjection],
        factor_sizes: Sequence[int],
        direction: Callable[[int], int],
        *,
        conservative: bool,
        elementwise: bool,
    ) -> tuple[list[bool], list[bool]]: ...


def _merge_compatible(old: list, new: Sequence[AxisRef], can_expand: bool) -> tuple[list, bool]:
    out: list[AxisRef] = []
    i = 0
    n_old, n_new = len(old), len(new)
    while i < n_old and i < n_new:
        o, n = old[i], new[i]
        i += 1
        if o[0] != n[0]:
            return out, False
        if o == n:
            out.append(n)
            continue
        if prefix_of(n, o):
            if i < n_new:
                out.append(n)
                return out, False
            out.append(o)
        elif prefix_of(o, n):
            if not can_expand or i < n_old:
                out.append(o)
                return out, False
            out.append(n)
        else:
            return out, False
    out.extend(old[i:])
    if can_expand:
        out.extend(new[i:])
    return out, can_expand


def compatible_major_axes(
    operands: list[TensorProjection], results: list[TensorProjection], f: int, direction: int
) -> list[AxisRef]:
    """The axes all tensors of factor ``f`` agree on, ignoring conflicts (3.3)."""
    if direction == NONE:
        return []
    first, second = (results, operands) if direction == BACKWARD else (operands, results)
    acc: list[AxisRef] = []
    ok = True
    # A tensor without axes for ``f`` merges as a no-op: it is skipped.
    for t in first:
        rec = t.factors.get(f)
        if rec is not None and rec[AXES]:
            acc, ok = _merge_compatible(acc, rec[AXES], ok)
    if direction != BOTH:
        ok = False
    for t in second:
        rec = t.factors.get(f)
        if rec is not None and rec[AXES]:
            acc, ok = _merge_compatible(acc, rec[AXES], ok)
    return acc


def truncate(axes: list[AxisRef], check: Check, conservative: bool) -> list[AxisRef]:
    """Cut ``axes`` at the first axis ``check`` rejects or shortens (3.4)."""
    prev = 1
    for i, axis in enumerate(axes):
        new = check(axis, prev)
        if new is None or (conservative and new[2] != new[3]):
            return axes[:i]
        if new != axis:
            return axes[:i] + [new]
        prev *= new[2]
    return axes


def across_factors(axis: AxisRef | None, t: TensorProjection, f: int) -> AxisRef | None:
    """Shrink ``axis`` so it overlaps no axis of another factor of ``t``."""
    for g, rec in t.factors.items():
        if g == f:
            continue
        if rec[OVERFLOW]:
            axis = prefix_without_overlap_all(axis, rec[OVERFLOW])
        if axis is None:
            return None
        if rec[AXES]:
            axis = prefix_without_overlap_all(axis, rec[AXES])
            if axis is None:
                return None
    return axis


def within_factor(
    axis: AxisRef, t: TensorProjection, rec: list, prev: int, factor_size: int
) -> AxisRef | None:
    """Shrink ``axis`` to what factor ``rec`` of ``t`` can hold after ``prev``."""
    result = prefix_without_overlap_all(axis, t.replicated) if t.replicated else axis
    if result is not None and t.unreduced:
        result = prefix_without_overlap_all(result, t.unreduced)
    if result is None:
        return None
    factor_axes = rec[AXES]
    for held in factor_axes:
        if contains(held, result):
            return result
    if not rec[CLOSED] and not rec[OVERFLOW]:
        if rec[MINOR_MOST]:
            return result
        if factor_size % prev == 0:
            g = gcd(factor_size // prev, result[2])
            if g == result[2]:
                return result
            if g != 1:
                return AxisRef(result[0], result[1], g, result[3])
    if factor_axes and prefix_of(factor_axes[-1], result):
        return factor_axes[-1]
    return None


def _expand(t: TensorProjection, f: int, axes: list[AxisRef]) -> bool:
    rec = t.factors.get(f)
    if rec is None or not is_strict_prefix(rec[AXES], axes):
        return False
    rec[AXES] = tuple(axes)
    return True


def basic_factor_propagation(
    operands, results, factor_sizes, direction, *, conservative, elementwise
) -> tuple[list[bool], list[bool]]:
    """Propagate, per factor, only the axes every tensor of the op can take (3.5)."""
    del elementwise
    tensors = operands + results
    updated = [False] * len(tensors)
    for f, factor_size in enumerate(factor_sizes):
        candidate = compatible_major_axes(operands, results, f, direction(f))
        if not candidate:
            continue

        def check(axis: AxisRef, prev: int, f=f, factor_size=factor_size) -> AxisRef | None:
            result: AxisRef | None = axis
            for t in tensors:
                result = across_factors(result, t, f)
                if result is None:
                    return None
                rec = t.factors.get(f)
                if rec is not None:
                    result = within_factor(result, t, rec, prev, factor_size)
                    if result is None:
                        return None
            return result

        axes = truncate(candidate, check, conservative)
        if not axes:
            continue
        for i, t in enumerate(tensors):
            if _expand(t, f, axes):
                updated[i] = True
    n = len(operands)
    return updated[:n], updated[n:]


def _source_tensors(tensors, factor_sizes, candidates) -> list[tuple[int, int]]:
    sources = [(-1, -1)] * len(factor_sizes)  # (size, index)
    for index, t in enumerate(tensors):
        size = 1
        for f in t.factors:
            size *= factor_sizes[f]
        for f, rec in t.factors.items():
            cand = candidates[f]
            # A candidate is never a prefix of no axes: most records are skipped uncalled.
            if cand and rec[AXES] and _is_prefix_or_equal(cand, rec[AXES]):
                if size > sources[f][0]:
                    sources[f] = (size, index)
    return sources


def _is_prefix_or_equal(first: Sequence[AxisRef], second: Sequence[AxisRef]) -> bool:
    n = len(first)
    if n == 0:
        return True
    if n > len(second):
        return False
    for i in range(n - 1):
        if first[i] != second[i]:
            return False
    return prefix_of(first[n - 1], second[n - 1])


def _propagated_axes(t, f, candidates, factor_sizes, conservative) -> list[AxisRef]:
    rec = t.factors.get(f)
    if rec is None:
        return []
    held, candidate = rec[AXES], candidates[f]
    # ``truncate`` keeps a prefix of the candidate, its last axis possibly cut to a
    # prefix of itself: never a strict extension of what the tensor holds when
    # that is longer than the candidate or the candidate itself.
    if len(held) >= len(candidate) and (len(held) > len(candidate)
                                        or list(held) == candidate):
        return []
    size = factor_sizes[f]
    axes = truncate(
        list(candidate),
        lambda axis, prev: within_factor(axis, t, rec, prev, size),
        conservative,
    )
    if not is_strict_prefix(held, axes):
        return []
    return truncate(axes, lambda axis, prev: across_factors(axis, t, f), conservative)


def aggressive_factor_propagation(
    operands, results, factor_sizes, direction, *, conservative, elementwise
) -> tuple[list[bool], list[bool]]:
    """Propagate per tensor, preferring factors with larger source tensors (4)."""
    candidates = [compatible_major_axes(operands, results, f, direction(f))
                  for f in range(len(factor_sizes))]
    if not any(candidates):
        return [False] * len(operands), [False] * len(results)
    sources = _source_tensors(operands + results, factor_sizes, candidates)
    # Only factors with a candidate: the others propagate nothing to any tensor.
    order = sorted(
        [f for f, candidate in enumerate(candidates) if candidate],
        key=lambda f: (
            -sources[f][0],
            -size_product(candidates[f]) if elementwise else 0,
            sources[f][1],
            f,
        ),
    )
    updated_results = []
    for t in results:
        changed = False
        for f in order:
            axes = _propagated_axes(t, f, candidates, factor_sizes, conservative)
            if axes:
                changed |= _expand(t, f, axes)
        updated_results.append(changed)
    updated_operands = []
    for t in operands:
        changed = False
        for f in order:
            axes = _propagated_axes(t, f, candidates, factor_sizes, conservative)
            if not axes:
                continue
            if elementwise:
                for r in results:
                    rec = r.factors.get(f)
                    if rec is not None and is_strict_prefix(rec[AXES], axes):
                        axes = list(rec[AXES])
            changed |= _expand(t, f, axes)
        updated_operands.append(changed)
    return updated_operands, updated_results
