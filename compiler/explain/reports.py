"""The predictions of one lowered program, from one read of its module.

``Lowered.comm_report()`` and ``Lowered.memory_estimate()`` both read the
module as propagation alone leaves it (``propagated_copy(export=False)``),
every value's final sharding decided. Propagating that copy and indexing it
(``ModuleValues``: the graph, every value's sharding and shape) costs more
than either prediction, and is the same for both and for every platform, so
``ProgramReports`` does it once, when first asked, and keeps the answers per
platform.

It reads the module as it is at the first prediction: a module changed in
place afterwards is not read again (assign ``Lowered.module`` a new module
for that: a new module is read anew).
"""

from __future__ import annotations

from jaxlib.mlir import ir

from shardc.compiler.cost.platforms import platform_rules, predicting_for
from shardc.compiler.cost.report import CommReport, comm_report_of
from shardc.compiler.explain.memory import MemoryEstimate, estimate_memory_of
from shardc.compiler.propagation import propagate_read
from shardc.compiler.propagation.values import ModuleValues
from shardc.compiler.stages import import_pipeline
from shardc.compiler.stages.shardy_pipeline import clone


class ProgramReports:
    """``comm_report`` and ``memory_estimate`` of one module, read once."""

    def __init__(self, module: ir.Module | ir.Operation) -> None:
        self.module = module
        self._values: ModuleValues | None = None
        self._comm: dict[str, CommReport] = {}
        self._memory: dict[tuple, MemoryEstimate] = {}

    def values(self) -> ModuleValues:
        """The propagated copy, read (a value without a sharding is replicated, as XLA
        takes it once propagation is over)."""
        if self._values is None:
            # ``propagated_copy(export=False)``, read through the propagation's own graph
            # and store: what reading the copy again builds, except where the propagation
            # erased ops or a manual computation's in-shardings are read again.
            copy = clone(self.module)
            with copy.context:
                import_pipeline(copy)
                graph, store = propagate_read(copy, plan="user-priority")
            read = None if any(graph.erased) or store.manual else (graph, store)
            self._values = ModuleValues(copy, missing_as_replicated=True, read=read)
        return self._values

    def comm_report(self, platform: str) -> CommReport:
        """The collectives XLA compiles the module with for ``platform``."""
        report = self._comm.get(platform)
        if report is None:
            values = self.values()
            # XLA's reshard reuse is followed op by op within one report: each starts
            # with none made.
            values.resharded = {}
            with predicting_for(platform_rules(platform)):
                report = self._comm[platform] = comm_report_of(values)
        return report

    def memory_estimate(self, platform: str,
                        arg_names: tuple[str, ...] | None) -> MemoryEstimate:
        """Per-device bytes as XLA lays them out on ``platform``."""
        key = (platform, arg_names)
        estimate = self._memory.get(key)
        if estimate is None:
            estimate = self._memory[key] = estimate_memory_of(
                self.values(), arg_names=arg_names, platform=platform)
        return estimate


__all__ = ["ProgramReports"]
