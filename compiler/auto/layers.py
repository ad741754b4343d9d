"""Repeated layers searched once: the step with each long list of like layers cut to a few.

A step whose parameters hold a long list of layers of one structure (a Python
loop over ``params["layers"]``, unrolled: 32 copies of every op) costs the
search a propagation and a pricing of every copy in every state, though the
layers' weights form one structure group per role and take one spec. The
search then runs on the same function given the list cut to ``KEPT`` layers
(the first, two from the middle, the last: the first and the last differ from
the others, the first's input gradient being dropped, the last's output read by
the head), and its choices are carried back to every layer: each argument takes
its cut counterpart's spec (a middle layer the middle ones'), each activation
group the spec its anchors' like (same equation, same types) took in the cut
step. The full step then prices that state beside the textbook configurations
and keeps the best (``Search.confirm``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

import jax
import numpy as np
from jax.tree_util import DictKey, SequenceKey

# The layers a cut list keeps: the first, two of the middle (a middle layer beside
# another middle one, as most are), the last.
KEPT = 4
# How many of the cut step's best states the full step prices (``Search.confirm``).
CARRIED = 16
# The shortest list cut: below it the full search costs at most three times the cut one's
# per state, and its choices need no carrying.
MIN_LAYERS = 3 * KEPT


def _like(children: Sequence[Any]) -> bool:
    """Whether every child has the first's tree structure and leaf types."""
    first = jax.tree.structure(children[0])
    kinds = [_kind(x) for x in jax.tree.leaves(children[0])]
    return bool(kinds) and all(
        jax.tree.structure(c) == first and [_kind(x) for x in jax.tree.leaves(c)] == kinds
        for c in children[1:])


def _kind(leaf: Any) -> Any:
    if hasattr(leaf, "shape") and hasattr(leaf, "dtype"):
        return tuple(np.shape(leaf)), str(leaf.dtype)
    return type(leaf), leaf


def kept_index(index: int, length: int) -> int:
    """The cut list's layer that layer ``index`` of ``length`` takes its spec from."""
    if index == 0:
        return 0
    if index == length - 1:
        return KEPT - 1
    return 2 if index == length - 2 else 1


class Cut:
    """``full`` (the step's dynamic arguments: a list of positional ones and a dict of
    keyword ones) with every list or tuple of at least
    ``MIN_LAYERS`` like children cut to ``KEPT``: ``tree`` (the cut one) and, per
    leaf of the full tree, the index of the cut tree's leaf it takes its spec from
    (``origin``). ``lists`` is how many were cut (0: nothing to cut)."""

    def __init__(self, full: Any):
        self.lists: dict[tuple, int] = {}  # path of a cut list (in the cut tree) -> its length
        positional, keywords = full  # the arguments themselves are never cut
        self.tree = ([self._cut(a, (SequenceKey(0), SequenceKey(i)))
                      for i, a in enumerate(positional)],
                     {k: self._cut(v, (SequenceKey(1), DictKey(k))) for k, v in keywords.items()})
        paths = [path for path, _ in jax.tree_util.tree_flatten_with_path(self.tree)[0]]
        where = {path: i for i, path in enumerate(paths)}
        self.origin = [where[self._kept_path(path)]
                       for path, _ in jax.tree_util.tree_flatten_with_path(full)[0]]

    def _cut(self, node: Any, path: tuple) -> Any:
        if type(node) in (list, tuple):
            if len(node) >= MIN_LAYERS and _like(node):
                self.lists[path] = len(node)
                keep = [0, 1, len(node) // 2, len(node) - 1]
                return type(node)(self._cut(node[i], (*path, SequenceKey(k)))
                                  for k, i in enumerate(keep))
            return type(node)(self._cut(c, (*path, SequenceKey(k))) for k, c in enumerate(node))
        if isinstance(node, dict) and type(node) is dict:
            return {k: self._cut(v, (*path, DictKey(k))) for k, v in node.items()}
        return node

    def _kept_path(self, path: tuple) -> tuple:
        kept: list = []
        for key in path:
            length = self.lists.get(tuple(kept))
            if length is not None:
                key = SequenceKey(kept_index(key.idx, length))
            kept.append(key)
        return tuple(kept)


def cut_layers(tree: Any) -> Cut | None:
    """The cut of ``tree`` where it holds a list long enough to cut, else None."""
    cut = Cut(tree)
    return cut if cut.lists else None


def anchor_signature(eqn: Any) -> tuple:
    """What makes two anchors alike across the full and the cut step: the equation's
    primitive, parameters and types."""
    return (eqn.primitive.name, repr(sorted(eqn.params.items())),
            tuple(str(v.aval) for v in eqn.invars), tuple(str(v.aval) for v in eqn.outvars))


def vote(specs: Sequence[Any]) -> Any:
    """The commonest of ``specs`` (the first seen among equals); None for none."""
    if not specs:
        return None
    counts = Counter(specs)
    best = max(counts.values())
    return next(s for s in specs if counts[s] == best)


__all__ = ["CARRIED", "KEPT", "MIN_LAYERS", "Cut", "anchor_signature", "cut_layers", "kept_index", "vote"]
