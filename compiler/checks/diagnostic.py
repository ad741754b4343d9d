"""The record a sharding check returns, and the error ``Lowered.check`` raises.

``ShardingDiagnostic`` is a ``shardc.compiler.diagnostics.Diagnostic`` plus a
*kind* (a stable kebab-case code such as ``indivisible-dimension``) and the
MLIR location the pass reports it at. Messages end with the kind in brackets
so a printed diagnostic says which check produced it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from jaxlib.mlir import ir

from shardc.compiler.diagnostics import Diagnostic, Severity, SourceLoc, source_loc_of
from shardc.dialects.errors import ShardingError

ERROR_KINDS = (
    "constraint-contradicts-pinned",
    "manual-mesh-mismatch",
    "mesh-device-count",
)
WARNING_KINDS = (
    "implicit-reshard",
    "indivisible-dimension",
    "manual-axis-not-in-output",
    "replicated-large-tensor",
    "replicated-output",
)


@dataclass(frozen=True)
class ShardingDiagnostic:
    """One finding of a sharding check, at an op (and its source line)."""

    kind: str
    severity: Severity
    message: str
    loc: SourceLoc | None
    op: str
    location: ir.Location | None = field(default=None, compare=False, repr=False)

    @property
    def text(self) -> str:
        """The message with its kind, as the pass prints it."""
        return f"{self.message} [{self.kind}]"

    def to_diagnostic(self) -> Diagnostic:
        """The generic diagnostic record (what ``shardc-opt`` prints)."""
        return Diagnostic(self.severity, self.loc, self.text)

    def __str__(self) -> str:
        where = f"{self.loc}: " if self.loc else ""
        return f"{where}{self.severity.value}: {self.text}"


def at(op: ir.Operation | ir.OpView, kind: str, severity: Severity,
       message: str) -> ShardingDiagnostic:
    """Build a diagnostic located at ``op``."""
    return ShardingDiagnostic(kind, severity, message, source_loc_of(op.location),
                              op.operation.name, op.location)


class ShardingCheckError(ShardingError):
    """Sharding checks found errors; ``diagnostics`` holds every finding."""

    def __init__(self, diagnostics: list[ShardingDiagnostic]):
        errors = [d for d in diagnostics if d.severity == Severity.ERROR]
        super().__init__(
            f"{len(errors)} sharding error(s):\n" + "\n".join(str(d) for d in errors)
        )
        self.diagnostics = diagnostics


__all__ = ["ERROR_KINDS", "WARNING_KINDS", "Severity", "ShardingCheckError",
           "ShardingDiagnostic", "at"]
