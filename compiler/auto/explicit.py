"""AUTO on a mesh of Explicit axes: what sharding-in-types means by letting the compiler choose.

On an Explicit axis a sharding is part of each value's type: jax's rules derive
every intermediate's sharding from its operands' (and refuse a dot whose
contraction is sharded without an ``out_sharding``), so no search can leave an
activation open (an open constraint, ``P.UNCONSTRAINED``, names Auto axes only)
nor constrain one. jax's own word for "the compiler chooses" there is
``jax.sharding.auto_axes``: the function runs with those axes Auto, its
arguments entering with their types' shardings and its results leaving resharded
to ``out_sharding``. AUTO on such a mesh is that: the search runs on the mesh
with its Explicit axes made Auto (``searched``), and the program it returns takes
the chosen argument shardings as their types, runs the function (with the chosen
activation constraints, on the Auto form) under ``auto_axes`` over those axes
and returns its results typed with the chosen result shardings
(``typed_function``): shardings valid for the caller's mesh, with the values'
types saying them as ``jax.jit`` on that mesh would.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import jax
from jax.sharding import AbstractMesh, AxisType, Mesh, NamedSharding, PartitionSpec

from shardc.compiler.auto.marker import is_leaf


def explicit_axes(mesh: Mesh | AbstractMesh) -> tuple[str, ...]:
    """The mesh's Explicit axes."""
    return tuple(name for name, kind in zip(mesh.axis_names, mesh.axis_types)
                 if kind == AxisType.Explicit)


def searched(mesh: Mesh | AbstractMesh) -> Mesh | AbstractMesh:
    """The mesh the search runs on: ``mesh`` with its Explicit axes Auto."""
    if not explicit_axes(mesh):
        return mesh
    return mesh.update(axis_types=tuple(AxisType.Auto if kind == AxisType.Explicit else kind
                                        for kind in mesh.axis_types))


def on_mesh(tree: Any, mesh: Mesh | AbstractMesh) -> Any:
    """A shardings tree with its ``NamedSharding`` leaves on ``mesh`` (the search's form
    of the caller's mesh: the same axes, other types)."""
    def leaf(value: Any) -> Any:
        if isinstance(value, NamedSharding) and value.mesh.axis_names == mesh.axis_names:
            return NamedSharding(mesh, value.spec, memory_kind=value.memory_kind)
        return value
    return jax.tree.map(leaf, tree, is_leaf=is_leaf)


def typed_function(function: Callable, mesh: Mesh | AbstractMesh, results: Any,
                   static_argnums: tuple[int, ...], static_argnames: tuple[str, ...]) -> Callable:
    """``function`` run with ``mesh``'s Explicit axes Auto, its results resharded to
    ``results`` (a sharding per result leaf, typed on ``mesh``): ``jax.sharding.auto_axes``
    over its dynamic arguments (the static ones stay Python values)."""
    # A result's type names its Explicit axes only (the Auto ones lie beneath it).
    types = jax.tree.map(lambda sharding: NamedSharding(mesh, _typed_spec(sharding.spec, mesh)),
                         results, is_leaf=is_leaf)

    @functools.wraps(function)
    def run(*args: Any, **kwargs: Any) -> Any:
        static = {i if i >= 0 else len(args) + i for i in static_argnums}
        static_kwargs = {k: v for k, v in kwargs.items() if k in static_argnames}

        def body(dynamic: list, dynamic_kwargs: dict) -> Any:
            rest = iter(dynamic)
            full = [args[i] if i in static else next(rest) for i in range(len(args))]
            return function(*full, **static_kwargs, **dynamic_kwargs)

        return jax.sharding.auto_axes(body, axes=explicit_axes(mesh), out_sharding=types)(
            [a for i, a in enumerate(args) if i not in static],
            {k: v for k, v in kwargs.items() if k not in static_argnames})
    return run


def _typed_spec(spec: PartitionSpec, mesh: Mesh | AbstractMesh) -> PartitionSpec:
    """``spec`` as a type on ``mesh``: its Explicit axes only."""
    explicit = set(explicit_axes(mesh))
    kept = []
    for entry in spec:
        names = tuple(n for n in (entry if isinstance(entry, tuple) else (entry,))
                      if n in explicit)
        kept.append(names if len(names) > 1 else (names[0] if names else None))
    return PartitionSpec(*kept)


__all__ = ["explicit_axes", "on_mesh", "searched", "typed_function"]
