"""``AUTO``: the leaf of ``in_shardings`` / ``out_shardings`` that asks shardc to choose.

jax's ``pjit.AUTO`` (XLA's auto-sharding) is gone from jax; shardc's ``AUTO`` is
a singleton that stands for one argument or result (or, as the whole tree,
for all of them) whose sharding ``lower()`` searches for (``shardc.compiler.auto``).
"""

from __future__ import annotations

from typing import Any

import jax

from shardc.dialects.errors import ShardcError


class AutoShardingError(ShardcError, ValueError):
    """An AUTO sharding shardc cannot search for (no mesh, a device instead of a mesh)."""


class _Auto:
    """The AUTO marker (one instance, ``AUTO``)."""

    _instance: _Auto | None = None

    def __new__(cls) -> _Auto:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "AUTO"

    def __reduce__(self) -> str:
        return "AUTO"


AUTO = _Auto()


def is_auto(value: Any) -> bool:
    return value is AUTO


def is_leaf(value: Any) -> bool:
    return value is None or value is AUTO or isinstance(value, (jax.sharding.Sharding,
                                                                jax.sharding.PartitionSpec))


def has_auto(*trees: Any) -> bool:
    """Whether any of these shardings trees has an AUTO leaf."""
    return any(is_auto(leaf) for tree in trees for leaf in jax.tree.leaves(tree, is_leaf=is_leaf))


def without_auto(tree: Any) -> Any:
    """The tree with its AUTO leaves as None (unspecified), for jit's own validation."""
    return jax.tree.map(lambda leaf: None if is_auto(leaf) else leaf, tree, is_leaf=is_leaf)


def broadcast(prefix: Any, full: Any) -> list[Any]:
    """The leaf of ``prefix`` (a shardings tree) each leaf of ``full`` falls under."""
    if is_leaf(prefix):
        return [prefix] * len(jax.tree.leaves(full))
    subtrees = jax.tree.structure(prefix, is_leaf=is_leaf).flatten_up_to(full)
    leaves = jax.tree.leaves(prefix, is_leaf=is_leaf)
    return [leaf for leaf, sub in zip(leaves, subtrees) for _ in jax.tree.leaves(sub)]
