"""Close every sharding in the module (``sdy-close-shardings``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from jaxlib.mlir import ir

from shardc.compiler.passes.base import ModulePass
from shardc.compiler.stages.export_steps import close_shardings


@dataclass(frozen=True)
class CloseShardingsPass(ModulePass):
    """Close all dimension shardings and drop replicated axes

    Reads every sharding (function arguments/results, ``sdy.sharding`` on ops,
    shardings of sdy ops). Writes each back with every dimension closed and
    no ``replicated=`` list; priorities and unreduced axes are kept.
    Afterwards no sharding prints a ``?``. Produces the same module as
    jaxlib's native ``sdy-close-shardings``.
    """

    name: ClassVar[str] = "shardc-close-shardings"
    aliases: ClassVar[tuple[str, ...]] = ("sdy-close-shardings",)
    upstream: ClassVar[str] = "sdy-close-shardings"

    def run(self, module: ir.Operation) -> None:
        """Close the shardings of ``module``."""
        close_shardings(module)
