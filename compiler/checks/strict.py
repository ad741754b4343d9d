"""Strict mode: what shardc would otherwise do silently becomes an error at a source line.

Three silent behaviours are turned into ``StrictModeError`` (a ``ValueError``):

* ``indivisible-dimension``: a dimension its axes do not divide, which XLA
  pads (from the checks in ``costly``);
* ``no-sharding-rule``: an op without a sharding rule (an unknown op or
  custom call target) that has a sharded operand or result, so propagation
  stops there and XLA replicates around it; ``register_sharding_rule`` fixes it;
* ``implicit-reshard``: a reshard the program did not ask for, of more than
  ``reshard_threshold_bytes`` per device (the all-reduce of a sharded
  contraction is intended communication and never counts).

``check_strict`` is what ``jit(..., strict=True)`` and ``shardc-opt --strict``
run; ``strict_diagnostics`` returns the findings instead of raising.
"""

from __future__ import annotations

from dataclasses import dataclass

from jaxlib.mlir import ir

from shardc.compiler.checks.diagnostic import ShardingDiagnostic, at
from shardc.compiler.checks.program import check_lowered
from shardc.compiler.diagnostics import Severity
from shardc.compiler.propagation.values import ModuleValues
from shardc.compiler.sharding.rules import NO_RULE, rule_for
from shardc.compiler.stages.shardy_pipeline import propagated_copy
from shardc.dialects.errors import ShardingError

STRICT_KINDS = ("implicit-reshard", "indivisible-dimension", "no-sharding-rule")
_NOT_COMPUTE = frozenset({"func.func", "func.return", "builtin.module"})


@dataclass(frozen=True)
class StrictOptions:
    """Which silent behaviours are errors, and the reshard size that is tolerated."""

    reshard_threshold_bytes: int = 0
    padding: bool = True
    missing_rules: bool = True
    reshards: bool = True


class StrictModeError(ShardingError):
    """Strict mode found something shardc would otherwise do silently."""

    def __init__(self, diagnostics: list[ShardingDiagnostic]):
        super().__init__(f"strict mode: {len(diagnostics)} error(s):\n"
                         + "\n".join(str(d) for d in diagnostics))
        self.diagnostics = diagnostics


def _missing_rules(module: ir.Operation) -> list[ShardingDiagnostic]:
    values = ModuleValues(propagated_copy(module, export=False), missing_as_replicated=True)
    graph, found = values.graph, []
    for op, name in enumerate(graph.op_name):
        if name in NO_RULE or name in _NOT_COMPUTE or name.startswith("sdy."):
            continue
        tensors = [v for v in (*graph.op_operands[op], *graph.op_results[op])
                   if graph.value_shape[v]]
        if not tensors or rule_for(graph.ops[op]) is not None:
            continue
        sharded = [v for v in graph.op_operands[op]
                   if (s := values.sharding(v)) is not None and any(d.axes for d in s.dims)]
        if not sharded:
            continue
        what = name
        if name == "stablehlo.custom_call":
            what = f"custom call @{graph.custom_call_target(op)}"
        found.append(at(graph.ops[op], "no-sharding-rule", Severity.ERROR,
                        f"{what} has no sharding rule: its {len(sharded)} sharded operand(s) "
                        "are replicated (all-gathered) around it; register one with "
                        "shardc.compiler.register_sharding_rule"))
    return found


def strict_diagnostics(module: ir.Module | ir.Operation,
                       options: StrictOptions | bool = True) -> list[ShardingDiagnostic]:
    """Every strict-mode finding of ``module`` (unchanged), as errors."""
    options = options if isinstance(options, StrictOptions) else StrictOptions()
    operation = module.operation
    kinds = set()
    if options.padding:
        kinds.add("indivisible-dimension")
    if options.reshards:
        kinds.add("implicit-reshard")
    found = [d for d in check_lowered(operation,
                                      reshard_threshold_bytes=options.reshard_threshold_bytes,
                                      replicated_threshold_bytes=1 << 62)
             if d.kind in kinds]
    if options.missing_rules:
        found += _missing_rules(operation)
    return [ShardingDiagnostic(d.kind, Severity.ERROR, d.message, d.loc, d.op, d.location)
            for d in found]


def check_strict(module: ir.Module | ir.Operation, options: StrictOptions | bool = True) -> None:
    """Raise ``StrictModeError`` (messages at file:line) if strict mode finds anything."""
    found = strict_diagnostics(module, options)
    if found:
        raise StrictModeError(found)
