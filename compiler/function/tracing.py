"""What a jitted function is traced with: its arguments as jax.jit traces them
(``traced_aval``), under ``jit(..., mesh=...)`` as the context mesh (``tracing_mesh``)."""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Iterator
from typing import Any

import jax
from jax.sharding import Mesh

from shardc.compiler import signature
from shardc.compiler.lowered import AnyMesh
from shardc.compiler.signature import LeafSignature
from shardc.dialects import jax_private
from shardc.runtime import tokens


def tracing_mesh(mesh: AnyMesh | None, *, staged: bool = False
                 ) -> contextlib.AbstractContextManager:
    """``jit(..., mesh=...)`` is the context mesh while the function is traced, so a
    bare ``PartitionSpec`` inside (a sharding constraint, ``shard_map``) resolves
    against it as it would under ``jax.set_mesh``.

    A concrete one is set as ``jax.set_mesh`` sets it when the trace is lowered by
    shardc (jax's own lowering checks Explicit-axis types against its devices);
    staged into an enclosing trace (``staged``), its abstract form only: jax takes
    no concrete mesh there, and the enclosing program decides the devices.
    """
    if mesh is None:
        return contextlib.nullcontext()
    if not staged and isinstance(mesh, Mesh) and mesh.axis_names:
        return jax_private.concrete_mesh_context(mesh)
    return jax.sharding.use_abstract_mesh(mesh.abstract_mesh)


def abstract_tree(value: Any, avals: Iterator[Any]) -> Any:
    """``value``'s pytree with its leaves' next avals from ``avals`` in their place; the
    value itself where its pytree refuses abstract leaves (a dataclass that checks
    its fields are arrays when unflattened, as ``StatefulPRNG`` does): jax.jit never
    unflattens avals into an argument, and traces the value by its leaves' types."""
    treedef = jax.tree.structure(value)
    leaves = list(itertools.islice(avals, treedef.num_leaves))
    try:
        return jax.tree.unflatten(treedef, leaves)
    except Exception:  # the node's own unflatten (user code) refused them, whatever its error
        return value


def traced_aval(leaf: LeafSignature) -> jax.ShapeDtypeStruct:
    """What an argument is traced as: its type with the sharding its own type carries
    (a placed array's, a ``ShapeDtypeStruct``'s), as jax.jit traces it; the
    ``in_shardings`` given to ``jit`` never enter the traced types.

    jax decides things at trace time from those types (constants it places, loop
    carries it hoists, Explicit axes), so a program traced otherwise can differ
    from the one jax.jit lowers. jax only reads the mesh's shape and axis types
    from it (its devices are decided when compiling), except that host callbacks
    need concrete devices to lower at all.

    A ``jax.Array`` made under ``jax.enable_x64()`` keeps its 64-bit type when x64 is
    off: jax traces it as it is, while a ``ShapeDtypeStruct`` would be traced as the
    canonical (32-bit) type, so such an argument is traced as its exact jax type.
    """
    aval, exact = leaf.aval, signature.traced_exactly(leaf.aval)
    if exact or leaf.memory_space is not None:  # types a ShapeDtypeStruct cannot spell
        return jax_private.typed_aval(aval, leaf.type_sharding, canonical=not exact,
                                      memory_space=leaf.memory_space)
    if leaf.type_sharding is None:
        return tokens.traced_type(aval)
    return aval.update(sharding=leaf.type_sharding)
