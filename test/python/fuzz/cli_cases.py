"""Fuzz cases for ``shardc-opt`` and the rules every run must obey.

A case is fully determined by ``(run_seed, index)`` and the seed corpus:
which lit seed it starts from, which mutations it applies and which command
line it uses. The first ``len(seeds)`` indices replay the seeds unmutated
(so the round-trip rule is checked on every valid lit input); later ones
mutate. The corpus grows with the lit suite, so a failing case is recorded
by its input file and command line, not by its index.

``problems_of`` states the contract checked for every run:

* the run ends with exit status 0 or 1 (returned, not raised);
* exit 1 comes with a diagnostic (``...: error: ...``) on stderr;
* nothing prints a Python ``Traceback`` and no exception reaches the
  CLI's catch-all (``shardc-opt: internal error: ...`` is a bug too: it is
  the traceback, hidden);
* every module printed on success parses again and prints identically.
"""

from __future__ import annotations

import dataclasses
import random
import re

from fuzz import mlir_mutators
from jaxlib.mlir import ir

# Pass flags are listed here rather than read from the registry at run time,
# so that a case index means the same command line while passes are added.
PASS_OPTIONS: dict[str, dict[str, tuple[str, ...]]] = {
    "shardc-drop-shardings": {"keep-meshes": ("true", "false"), "strict": ("true", "false")},
    "shardc-lift-inlined-meshes": {
        "add-stablehlo-mesh": ("true", "false"), "report-duplicates": ("true", "false")},
    "shardc-populate-op-sharding-rules": {"conservative-propagation": ("true", "false")},
    "shardc-basic-propagate": {
        "conservative-propagation": ("true", "false"), "keep-sharding-rules": ("true", "false")},
    "shardc-aggressive-propagate": {
        "propagation-strategy": ("aggressive", "basic-then-aggressive", "bogus"),
        "conservative-propagation": ("true", "false")},
    "shardc-op-priority-propagate": {"conservative-propagation": ("true", "false")},
    "shardc-user-priority-propagate": {"keep-sharding-rules": ("true", "false")},
    "canonicalize": {},
    "cse": {},
    "symbol-dce": {},
}
OPTIONAL_SWITCHES = {
    "--verify-diagnostics": 0.1,
    "--mlir-print-debuginfo": 0.1,
    "--allow-unregistered-dialect": 0.1,
    "--mlir-print-ir-after-all": 0.03,
    "--mlir-timing": 0.03,
}
OUTPUT_SPLIT_MARKER = "// -----"
_DIAGNOSTIC = re.compile(r"(?m)^.*\berror: \S")
_INTERNAL_ERROR = "internal error:"
_TRACEBACK = "Traceback (most recent call last)"


@dataclasses.dataclass(frozen=True)
class FuzzCase:
    """One input and command line (the input path is added when the case runs)."""

    index: int
    seed_path: str
    mutations: tuple[str, ...]
    data: bytes
    flags: tuple[str, ...]

    def describe(self) -> str:
        mutations = "+".join(self.mutations) or "unmutated"
        return f"case {self.index}: {self.seed_path} [{mutations}] {' '.join(self.flags)}"


def random_flags(rng: random.Random) -> list[str]:
    """A command line: maybe split, maybe switches, zero to two passes with random options."""
    flags = ["--split-input-file"] if rng.random() < 0.8 else []
    flags += [switch for switch, p in OPTIONAL_SWITCHES.items() if rng.random() < p]
    if rng.random() < 0.3:
        return flags
    for name in rng.sample(sorted(PASS_OPTIONS), rng.choice([1, 1, 1, 2])):
        options = PASS_OPTIONS[name]
        dash = rng.choice(["-", "--"])
        if options and rng.random() < 0.4:
            key = rng.choice(sorted(options))
            flags.append(f"{dash}{name}={key}={rng.choice(options[key])}")
        else:
            flags.append(f"{dash}{name}")
    return flags


def build_case(run_seed: int, index: int, seeds: list[tuple[str, bytes]]) -> FuzzCase:
    """The case ``index`` of the run ``run_seed`` (deterministic)."""
    if index < len(seeds):
        path, data = seeds[index]
        return FuzzCase(index, path, (), data, ("--split-input-file",))
    rng = random.Random(run_seed * 1_000_003 + index)
    path, data = rng.choice(seeds)
    donors = [donor for _, donor in seeds]
    mutated, mutations = mlir_mutators.mutate(rng, data, donors)
    return FuzzCase(index, path, tuple(mutations), mutated, tuple(random_flags(rng)))


def round_trip_problem(printed: str, allow_unregistered: bool) -> str | None:
    """Whether every printed module parses again and prints the same; None if it does."""
    from shardc.dialects import make_context

    for chunk in printed.split(OUTPUT_SPLIT_MARKER + "\n"):
        if not chunk.strip():
            continue
        context = make_context()
        context.allow_unregistered_dialects = allow_unregistered
        try:
            module = ir.Module.parse(chunk, context)
        except ir.MLIRError as error:
            return f"printed output does not parse again: {error}"[:2000]
        again = module.operation.get_asm(assume_verified=True)
        if again.rstrip("\n") != chunk.rstrip("\n"):
            return "printed output prints differently after re-parsing"
    return None


def problems_of(case: FuzzCase, exit_status: object, stdout: str, stderr: str) -> list[str]:
    """The ways a finished run broke the CLI's contract (empty if it did not)."""
    problems = []
    if exit_status not in (0, 1):
        problems.append(f"exit status {exit_status!r}, expected 0 or 1")
    if _TRACEBACK in stderr or _TRACEBACK in stdout:
        problems.append("a Python traceback was printed")
    if _INTERNAL_ERROR in stderr:
        line = next(line for line in stderr.splitlines() if _INTERNAL_ERROR in line)
        problems.append(f"an exception reached the CLI's catch-all: {line.strip()[:500]}")
    if exit_status == 1 and not _DIAGNOSTIC.search(stderr):
        problems.append("exit 1 without an error diagnostic")
    if exit_status == 0 and "--mlir-print-debuginfo" not in case.flags:
        problem = round_trip_problem(stdout, "--allow-unregistered-dialect" in case.flags)
        if problem:
            problems.append(problem)
    return problems
