"""The result shardings shardc gives jax's lowering of a traced program: its PRNG keys'.

shardc lowers what it traced with jax and writes the shardings itself, so jax
lowers without the shardings given to ``jit``. jax's lowering reads one of
them, though: a result of a PRNG key type (an extended dtype) without a given
sharding gets a ``sdy.sharding_constraint`` that leaves the key's dims open
and replicates its key-data dims; with one given, none. For the module to be
jax.jit's, the given shardings of key results reach jax's lowering; the
others' never do (jax would write them, and their memory kinds and layouts,
where shardc writes its own).
"""

from __future__ import annotations

from collections.abc import Sequence

import jax

from shardc.compiler.signature import LeafSignature


def key_result_shardings(results: Sequence[LeafSignature]) -> list | None:
    """Per result, its given sharding if it is a PRNG key (None otherwise); None when
    no key result has one."""
    shardings = [leaf.sharding if leaf.sharding is not None
                 and jax.dtypes.issubdtype(leaf.aval.dtype, jax.dtypes.extended) else None
                 for leaf in results]
    return shardings if any(s is not None for s in shardings) else None
