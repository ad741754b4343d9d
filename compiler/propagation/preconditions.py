"""What a module must satisfy before the propagation passes run on it.

Propagation reads meshes through ``sdy.mesh`` symbols (as Shardy's does). A
sharding that writes its mesh inline (``#sdy.sharding<mesh<["x"=2]>, ...>``)
is legal IR, but only the import step ``shardc-lift-inlined-meshes`` (which
the propagation pipeline runs first) turns it into a symbol; Shardy's own
standalone passes crash on such input. shardc's say so, at the op.
"""

from __future__ import annotations

import re

from jaxlib.mlir import ir

from shardc.compiler.diagnostics import PassError

# `#sdy.sharding<mesh<[`, or an entry `<mesh<[` of a per-value list or an op's
# own sharding; the symbol form is `<@mesh`.
_INLINE_MESH = re.compile(r"<\s*mesh\s*<\s*\[")
# Only these attributes can hold shardings: skip printing every other one.
_MAY_HOLD_SHARDINGS = re.compile(r"sharding|arg_attrs|res_attrs")


def require_mesh_symbols(module: ir.Operation, pass_name: str) -> None:
    """Raise ``PassError`` at the first op or function whose sharding has an inline mesh."""
    found: list[tuple[ir.Operation, str]] = []

    def visit(op: ir.Operation) -> ir.WalkResult:
        for index in range(len(op.attributes)):
            named = op.attributes[index]
            if _MAY_HOLD_SHARDINGS.search(named.name) and _INLINE_MESH.search(str(named.attr)):
                found.append((op, named.name))
                return ir.WalkResult.INTERRUPT
        return ir.WalkResult.ADVANCE

    module.walk(visit)  # raising inside the walk callback would lose the PassError
    if found:
        op, attribute = found[0]
        raise PassError(
            op,
            f"{pass_name} needs meshes as sdy.mesh symbols, but '{attribute}' writes its "
            "mesh inline; run shardc-lift-inlined-meshes first (the propagation pipeline does)",
        )
