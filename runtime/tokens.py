"""Token arguments and results (``jax.lax.create_token()``), as jax.jit passes them.

jax traces a token as its abstract token type and lowers it as a
``!stablehlo.token``; at run time a token is an empty boolean buffer on each of
the program's devices, wrapped in jax's token object when it comes back. A
token leaf's signature is a ``TokenStruct``: the shape and dtype of that buffer
(what placing and checking arguments read), marked as a token for what tracing
and result handling must see instead.
"""

from __future__ import annotations

from typing import Any

import jax
import numpy as np

from shardc.dialects import jax_private
from shardc.runtime import arguments


class TokenStruct(jax.ShapeDtypeStruct):
    """The signature of a token leaf: its run-time buffer's type (``bool[0]``),
    never equal to an array's of that type."""

    def __init__(self) -> None:
        super().__init__((0,), np.bool_)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, TokenStruct)

    def __hash__(self) -> int:
        return hash(TokenStruct)

    def __repr__(self) -> str:
        return "TokenStruct()"


TOKEN = TokenStruct()


def is_token(value: Any) -> bool:
    """Whether ``value`` is a token or a token's type (jax's or a ``TokenStruct``)."""
    return isinstance(value, (TokenStruct, *jax_private.token_types()))


def traced_type(aval: jax.ShapeDtypeStruct) -> Any:
    """What a leaf is traced as: jax's abstract token for a token, else ``aval``."""
    return jax_private.abstract_token() if isinstance(aval, TokenStruct) else aval


def result_aval(aval: jax.ShapeDtypeStruct, sharding: Any) -> Any:
    """A result's type as jax's result handlers take it (``jax_private.typed_aval``,
    of the dtype it was traced with); a token's is jax's abstract token, so that it
    comes back as a token object."""
    if isinstance(aval, TokenStruct):
        return jax_private.abstract_token()
    return jax_private.typed_aval(aval, sharding, canonical=False)


def _place_token(token: Any, expected: arguments.ExpectedArgument,
                 counts: arguments.PlacementCounts) -> jax.Array:
    # As jax's shard_args for tokens: the program may only run after the work the
    # token orders before it, then reads a fresh empty buffer on its devices.
    token.block_until_ready()
    counts.placed += 1
    return jax_private.place_as_jit(np.array([], dtype=np.bool_), expected.sharding)


arguments.register_argument_handler(jax_private.token_types()[0], _place_token)
