"""Running programs with side effects as ``jax.jit`` runs them: tokens and ``Ref``s.

jax's lowering gives a program with *ordered* effects (``debug.print(...,
ordered=True)``, ``io_callback(..., ordered=True)``) one token argument and
one token result per effect, in front of the others; the runtime passes each
effect's token from one program to the next, so those effects happen in call
order across programs, and records every device's runtime token, which
``jax.effects_barrier()`` waits for. Programs with any effect or host
callback run with runtime tokens. shardc threads jax's own tokens, so
shardc's and ``jax.jit``'s programs stay ordered with each other.

A program reading or writing mutable arrays (``jax.new_ref``) takes each
``Ref``'s buffer as an argument (a ``Ref`` passed in, or closed over: those go
after the arguments) and returns its new value as an extra result, which the
runtime writes back into the ``Ref`` after the call.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from shardc.dialects import jax_private


@dataclasses.dataclass(frozen=True)
class ProgramEffects:
    """What a program's effects ask of its calls (jax's lowering decided it)."""

    # jax's ordered effects, one leading token argument and result each.
    ordered: tuple = ()
    # Whether the program has unordered effects (they need runtime tokens only).
    unordered: bool = False
    # The ``Ref``s the function closes over: extra arguments after the call's.
    closed_refs: tuple = ()
    # Per result after the tokens: the argument (after the tokens, closed refs
    # counted) whose ``Ref`` it updates, or None for a result of the function;
    # None when the program touches no ``Ref``.
    writes: tuple[int | None, ...] | None = None

    @property
    def tokens(self) -> int:
        """How many token arguments (and results) the program has, in front."""
        return len(self.ordered)

    @property
    def mutates(self) -> bool:
        """Whether the program updates ``Ref``s."""
        return self.writes is not None

    def buffers(self, leaves: Sequence[Any]) -> list:
        """The arrays a call passes for its argument leaves: each ``Ref``'s buffer in its
        place, then those of the closed-over ``Ref``s."""
        values = [*leaves, *self.closed_refs]
        return [jax_private.ref_buffer(v) if jax_private.is_ref(v) else v for v in values]

    def write_back(self, leaves: Sequence[Any], outputs: Sequence[Any]) -> list:
        """Put the new values into their ``Ref``s; return the function's own results."""
        if self.writes is None:
            return list(outputs)
        arguments = [*leaves, *self.closed_refs]
        own = []
        for source, output in zip(self.writes, outputs):
            if source is None:
                own.append(output)
            elif jax_private.is_ref(arguments[source]):
                jax_private.replace_ref_buffer(arguments[source], output)
        return own


NO_EFFECTS = ProgramEffects()


def execute_with_tokens(executable: Any, placed: Sequence[Any], handlers: Sequence[Any],
                        effects: ProgramEffects) -> list:
    """Execute with runtime tokens, as jax's dispatch does: each ordered effect's
    token in front of the arguments, its result token kept for the next program,
    every device's runtime token kept for ``jax.effects_barrier()``."""
    devices = executable.local_devices()
    tokens = jax_private.runtime_token_inputs(list(effects.ordered), devices)
    executed = executable.execute_sharded([*tokens, *placed], with_tokens=True)
    token_buffers = executed.consume_with_handlers([lambda xs: xs] * effects.tokens,
                                                   strict=False)
    jax_private.set_runtime_tokens(list(effects.ordered), token_buffers,
                                   executed.consume_token(), devices)
    return executed.consume_with_handlers(list(handlers))
