"""The ``shardc-lift-inlined-meshes`` pass (``stages.lift_inlined_meshes`` does the work)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from jaxlib.mlir import ir

from shardc.compiler.passes.base import ModulePass, option
from shardc.compiler.stages.lift_inlined_meshes import lift_inlined_meshes


@dataclass(frozen=True)
class LiftInlinedMeshesPass(ModulePass):
    """Replace inline meshes in shardings by de-duplicated sdy.mesh symbols

    Reads every sharding (function argument/result attributes, ``sdy.sharding``
    on ops, the shardings of sdy ops). Writes one ``sdy.mesh`` per distinct
    mesh, named as Shardy's import does (``@mesh``, ``@mesh_0``, ...,
    ``@empty_mesh``, ``@maximal_mesh_<id>``), placed after the last existing
    mesh symbol (or at the top of the module). Existing mesh symbols with the
    same mesh are reused, and duplicate mesh symbols are merged into the first.
    Afterwards no sharding holds an inline mesh.
    """

    name: ClassVar[str] = "shardc-lift-inlined-meshes"
    aliases: ClassVar[tuple[str, ...]] = ("sdy-lift-inlined-meshes",)
    upstream: ClassVar[str] = "sdy-lift-inlined-meshes"

    add_stablehlo_mesh: bool = option(
        True, help="attach the stablehlo.mesh attribute to each sdy.mesh, as jaxlib does"
    )
    report_duplicates: bool = option(
        False, help="emit a remark for each duplicate mesh symbol that is merged"
    )

    def run(self, module: ir.Operation) -> None:
        """Lift the inline meshes of ``module``."""
        lift_inlined_meshes(
            module,
            add_stablehlo_mesh=self.add_stablehlo_mesh,
            report_duplicates=self.report_duplicates,
        )
