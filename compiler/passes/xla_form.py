"""The ``shardc-xla-form`` pass (``dialects.xla_form`` does the work)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from jaxlib.mlir import ir

from shardc.compiler.diagnostics import PassError
from shardc.compiler.passes.base import ModulePass
from shardc.compiler.propagation.ir_access import EDGE_OP
from shardc.compiler.sharding.walker import nested_ops
from shardc.dialects.xla_form import check_xla_form, to_xla_form


@dataclass(frozen=True)
class XlaFormPass(ModulePass):
    """Rewrite a propagated module into the form shardc hands XLA's compiler

    What ``.compile()`` does to a copy of the lowered module before XLA
    converts it: a loop's per-carry shardings become closed constraints of its
    operands, block arguments and results (XLA's loop simplification drops
    carries without shortening a loop's sharding), reshards become pairs of
    constraints, round-trip reshapes fold, and shardings XLA's conversion
    refuses move onto constraints. The result is then checked: a module XLA
    could abort on fails as an internal error naming the op.
    """

    name: ClassVar[str] = "shardc-xla-form"

    def run(self, module: ir.Operation) -> None:
        """Rewrite ``module`` into XLA's form, then check it."""
        edges = nested_ops(module, ir.WalkOrder.PRE_ORDER, {EDGE_OP})
        if edges:  # XLA takes a propagated module: its edges are sunk into their owners
            raise PassError(edges[0], f"{self.name} takes a module without data-flow edges; "
                                      "run shardc-sink-data-flow-edges first")
        to_xla_form(module)
        check_xla_form(module)
