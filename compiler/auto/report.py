"""Why each AUTO choice won: the record ``Lowered.auto_report()`` returns.

One ``Choice`` per structure group of AUTO arguments: the arguments, the spec
kept and its modelled step, and the runner-up (the best other candidate priced
in the last pass over the group) with its step, so a reader sees what the
choice saved; then the results' specs (propagated from the arguments') and
the search's own figures.
"""

from __future__ import annotations

from dataclasses import dataclass

from jax.sharding import PartitionSpec

from shardc.compiler.auto.candidates import Spec
from shardc.compiler.auto.objective import StepTime
from shardc.compiler.auto.search import FLOPS_SLACK, Outcome


def partition_spec(spec: Spec | None) -> PartitionSpec | None:
    """A ``Spec`` as the ``PartitionSpec`` a user pastes (trailing unsharded dims dropped;
    an open one ``UNCONSTRAINED``); None for None (an activation left unconstrained)."""
    if spec is None:
        return None
    entries = [PartitionSpec.UNCONSTRAINED if used is None else None if not used
               else used[0] if len(used) == 1 else tuple(used) for used in spec]
    while entries and entries[-1] is None:
        entries.pop()
    return PartitionSpec(*entries)


@dataclass(frozen=True)
class Choice:
    arguments: tuple[str, ...]
    shape: tuple[int, ...]
    chosen: PartitionSpec
    step: StepTime
    runner_up: PartitionSpec | None
    runner_up_step: StepTime | None
    candidates: int
    settled: bool = False  # taken as propagation settled it around earlier choices

    def why(self, budget: int | None, flops_limit: float | None = None) -> str:
        """Why the choice beat the runner-up, in the objective's terms."""
        if self.runner_up_step is None:
            return ("settled by propagation around the arguments chosen before it"
                    if self.settled else "the only candidate priced")
        if budget is not None and self.runner_up_step.estimated and (
                self.runner_up_step.memory_peak > budget >= self.step.memory_peak):
            return (f"the runner-up's memory {self.runner_up_step.memory_peak} B exceeds the "
                    f"budget")
        if flops_limit is not None and self.runner_up_step.flops > flops_limit >= self.step.flops:
            return (f"the runner-up's {self.runner_up_step.flops:.4g} operations per device "
                    f"exceed the least state's by more than {FLOPS_SLACK:.0%}")
        parts = []
        for name in ("compute_s", "comm_s"):
            saved = getattr(self.runner_up_step, name) - getattr(self.step, name)
            if saved > 0:
                parts.append(f"{name[:-2]} -{saved * 1e3:.4f} ms")
        if self.runner_up_step.memory_peak > self.step.memory_peak:
            parts.append(f"memory -{self.runner_up_step.memory_peak - self.step.memory_peak} B")
        return "saves " + (", ".join(parts) if parts else "nothing (a tie, first kept)")


@dataclass(frozen=True)
class AutoReport:
    choices: tuple[Choice, ...]
    results: tuple[PartitionSpec | None, ...]
    step: StepTime
    evaluations: int
    seconds: float
    exhaustive: bool
    budget: int | None
    flops_limit: float | None = None
    # XLA's bytes per device of the chosen program, where the search compiled it, and the
    # bytes the memory model's were held to where a state compiled over the budget
    compiled_memory: int | None = None
    model_budget: int | None = None

    def format_text(self) -> str:
        how = "exhaustive" if self.exhaustive else "greedy + coordinate descent"
        budget = "none" if self.budget is None else f"{self.budget} B"
        if self.compiled_memory is not None:
            budget += f" (compiled: {self.compiled_memory} B)"
        if self.model_budget is not None:
            budget += f", the model's bytes held to {self.model_budget} B"
        lines = [f"AUTO shardings: {self.step.format_text()}; {how}, {self.evaluations} "
                 f"states priced in {self.seconds:.2f}s; memory budget {budget}"]
        for c in self.choices:
            names = ", ".join(c.arguments[:3]) + (
                f" (+{len(c.arguments) - 3} more)" if len(c.arguments) > 3 else "")
            chosen = "unconstrained" if c.chosen is None else c.chosen
            lines.append(f"  {names} {c.shape}: {chosen} of {c.candidates} candidates, "
                         f"{c.why(self.judged_budget, self.flops_limit)}")
            lines.append(f"    chosen    {c.step.format_text()}")
            if c.runner_up is not None:
                lines.append(f"    runner-up {c.runner_up} {c.runner_up_step.format_text()}")
        lines.append("  results: " + ", ".join(str(r) for r in self.results))
        return "\n".join(lines)

    @property
    def judged_budget(self) -> int | None:
        """The bytes the memory model's were judged against."""
        return self.budget if self.model_budget is None else self.model_budget

    def __str__(self) -> str:
        return self.format_text()


def auto_report(outcome: Outcome) -> AutoReport:
    choices = []
    for group in outcome.groups:
        # ``group.tried`` is in the search's order: its best, then the runner-up
        others = [s for s in group.tried if s != group.chosen]
        step = group.tried.get(group.chosen, outcome.step)
        runner = others[0] if others else None
        choices.append(Choice(tuple(group.names), group.shape, partition_spec(group.chosen),
                              step, partition_spec(runner) if runner is not None else None,
                              group.tried[runner] if runner is not None else None,
                              len(group.candidates), group.settled))
    return AutoReport(tuple(choices), tuple(partition_spec(r) if r is not None else None
                                            for r in outcome.results),
                      outcome.step, outcome.evaluations, outcome.seconds, outcome.exhaustive,
                      outcome.budget, outcome.flops_limit, outcome.compiled_memory,
                      outcome.model_budget)
