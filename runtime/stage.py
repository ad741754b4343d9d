"""What every stage of a shardc-jitted function says about its arguments, as jax's do.

``Lowered`` and ``Compiled`` both carry ``args_info`` (``jax.stages.ArgInfo`` per
argument leaf, in the ``(args, kwargs)`` structure); jax derives the donated
positions from it, and so do they.
"""

from __future__ import annotations

from typing import Any

import jax


class Stage:
    """``donate_argnums`` from ``args_info``."""

    args_info: Any = None

    @property
    def donate_argnums(self) -> tuple[int, ...]:
        """The flat indices of the donated argument leaves."""
        return tuple(i for i, info in enumerate(jax.tree.leaves(self.args_info))
                     if info.donated)
