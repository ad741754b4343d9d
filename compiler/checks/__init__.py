"""Sharding checks: errors for what cannot be right, warnings for what is costly.

``check_shardings(module, options)`` reads every sharding of a module once
(``shardc.compiler.propagation.values.ModuleValues``) and returns
``ShardingDiagnostic`` records, each at the op it is about (for a JAX program
that op's location is the user's source line). The structural checks
(``structural``) cover what the sdy verifier lets through: meshes of
different device counts in one program, shardings inside a manual
computation on another mesh, and sharding constraints that contradict a
pinned argument or result sharding. The cost checks (``costly``) warn about
indivisible dimensions and their padding, implicit reshards with their bytes
per device, large replicated tensors and replicated outputs of sharded
programs. The ``shardc-check-shardings`` pass and ``Lowered.check()`` are thin
layers over this function.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from jaxlib.mlir import ir

from shardc.compiler.checks import costly, structural
from shardc.compiler.checks.diagnostic import (
    Severity,
    ShardingCheckError,
    ShardingDiagnostic,
)
from shardc.compiler.propagation.values import ModuleValues


@dataclass(frozen=True)
class CheckOptions:
    """Thresholds and switches of the checks (the pass options, as a value)."""

    replicated_threshold_bytes: int = 1 << 20
    reshard_threshold_bytes: int = 0
    assume_replicated: bool = False
    werror: bool = False
    structural: bool = True
    cost: bool = True


def check_shardings(module: ir.Module | ir.Operation,
                    options: CheckOptions = CheckOptions()) -> list[ShardingDiagnostic]:
    """Run the checks on ``module`` (unchanged) and return their diagnostics in op order."""
    values = ModuleValues(module.operation, missing_as_replicated=options.assume_replicated)
    found: list[ShardingDiagnostic] = []
    if options.structural:
        found += structural.check(values)
    if options.cost:
        found += costly.check(values, replicated_threshold=options.replicated_threshold_bytes,
                              reshard_threshold=options.reshard_threshold_bytes)
    if options.werror:
        found = [replace(d, severity=Severity.ERROR) for d in found]
    return found


__all__ = [
    "CheckOptions",
    "Severity",
    "ShardingCheckError",
    "ShardingDiagnostic",
    "check_shardings",
]
