"""Sharding checks of a lowered JAX program (what ``Lowered.check()`` runs).

The program as lowered is checked for structural errors and indivisible
dimensions; a propagated copy (``shardc.compiler.stages.shardy_pipeline``) is
checked for what propagation decides: implicit reshards, replicated tensors
and outputs, intermediate dimensions left indivisible. Duplicates are
dropped, so each finding appears once, at the user's source line.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from jaxlib.mlir import ir

from shardc.compiler.checks import CheckOptions, check_shardings
from shardc.compiler.checks.diagnostic import ShardingCheckError, ShardingDiagnostic
from shardc.compiler.diagnostics import Severity
from shardc.compiler.stages.shardy_pipeline import propagated_copy


def check_lowered(module: ir.Module | ir.Operation, *, raise_on_error: bool = False,
                  **options: Any) -> list[ShardingDiagnostic]:
    """Check a lowered module and its propagated copy; the module is not changed.

    ``options`` are ``CheckOptions`` fields (``werror``,
    ``replicated_threshold_bytes``, ``reshard_threshold_bytes``). With
    ``raise_on_error`` a ``ShardingCheckError`` carrying every diagnostic is
    raised when any of them is an error.
    """
    base = CheckOptions(**options)
    found = check_shardings(module, replace(base, assume_replicated=False))
    try:
        copy = propagated_copy(module, export=False)
    except Exception as error:  # noqa: BLE001 - a propagation bug must not hide the checks
        found.append(ShardingDiagnostic(
            "propagation-failed", Severity.REMARK,
            f"propagation failed ({type(error).__name__}: {error}); only the shardings "
            "written in the program were checked", None, "builtin.module"))
    else:
        found += check_shardings(copy, replace(base, assume_replicated=True))
    unique: dict[tuple, ShardingDiagnostic] = {}
    for diagnostic in found:
        unique.setdefault((diagnostic.kind, diagnostic.loc, diagnostic.message), diagnostic)
    result = list(unique.values())
    if raise_on_error and any(d.severity == Severity.ERROR for d in result):
        raise ShardingCheckError(result)
    return result
