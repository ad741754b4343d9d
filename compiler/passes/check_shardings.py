"""Check shardings: errors for what is wrong, warnings for what is costly."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from jaxlib.mlir import ir

from shardc.compiler.checks import CheckOptions, check_shardings
from shardc.compiler.diagnostics import PassError, Severity, emit_remark, emit_warning
from shardc.compiler.passes.base import ModulePass, option


def report(module: ir.Operation, options: CheckOptions) -> None:
    """Run the checks and emit their diagnostics; raise ``PassError`` on errors."""
    errors = []
    for diagnostic in check_shardings(module, options):
        where = diagnostic.location or module.location
        if diagnostic.severity == Severity.ERROR:
            errors.append((where, diagnostic.text))
        elif diagnostic.severity == Severity.WARNING:
            emit_warning(where, diagnostic.text)
        else:
            emit_remark(where, diagnostic.text)
    for where, text in errors[:-1]:
        where.emit_error(text)
    if errors:
        raise PassError(*errors[-1])


@dataclass(frozen=True)
class CheckShardingsPass(ModulePass):
    """Report sharding errors and costly shardings at the ops they concern

    Reads every sharding (function arguments and results, op results,
    constraints, reshards, manual computations) and the op sharding rules;
    changes nothing. Errors: meshes of different device counts in one
    program, shardings inside a manual computation on another mesh,
    sharding constraints that contradict a pinned argument or result
    sharding (the sdy verifier already rejects unknown meshes and axes,
    duplicate axes and rank mismatches). Warnings: indivisible dimensions
    with their padding, implicit reshards with the collective and bytes per
    device XLA will need, large replicated tensors, replicated outputs of a
    sharded function, manual axes missing from a manual computation's
    out-sharding. Each message ends with its kind in brackets. Run it after
    propagation to see the reshards between propagated values.
    """

    name: ClassVar[str] = "shardc-check-shardings"
    needs_mesh_symbols: ClassVar[bool] = True

    werror: bool = option(False, help="report every warning as an error")
    replicated_threshold_bytes: int = option(
        1 << 20, help="warn about replicated tensors of at least this many bytes")
    reshard_threshold_bytes: int = option(
        0, help="warn about implicit reshards moving at least this many bytes per device")
    assume_replicated: bool = option(
        False, help="treat values without a sharding as replicated (as XLA does after "
                    "propagation) instead of unknown")

    def run(self, module: ir.Operation) -> None:
        """Check ``module``."""
        report(module, CheckOptions(
            replicated_threshold_bytes=self.replicated_threshold_bytes,
            reshard_threshold_bytes=self.reshard_threshold_bytes,
            assume_replicated=self.assume_replicated,
            werror=self.werror,
        ))
