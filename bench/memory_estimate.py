"""Per-device memory estimated before compiling (``Lowered.memory_estimate()``) against XLA.

For every program of ``bench/models``: lower with shardc, estimate arguments,
outputs and the live peak of temporaries from the propagated module, compile,
and compare with ``Compiled.memory_analysis()``. Prints a table and JSON with
the ratio estimate / XLA per field; a program whose total is off by more than
``TOLERANCE`` must have an entry in ``EXPLAINED`` saying why.
Run: ``python -m bench.memory_estimate [--size small|large] [--json out.json] [names...]``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import pathlib
import sys

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")

import shardc.compiler as sc  # noqa: E402
from bench.models import REGISTRY, make_programs  # noqa: E402
from bench.models.program import Program  # noqa: E402

TOLERANCE = 0.10
# Arguments match exactly and outputs to XLA's output tuple; the temporaries
# differ where XLA's fusion, scheduling and buffer reuse differ from the model.
EXPLAINED: dict[str, str] = {
    # Checked against XLA's buffer assignment and live ranges (compile with
    # --xla_dump_to, read *buffer-assignment.txt / *live-range.txt): the buffers
    # named are those live at XLA's temp peak, the model side is what the
    # liveness walk counts at its own peak.
    "conv_net": "temp 0.80x; XLA's peak (274720 B, at transpose_copy_fusion.1 in the backward) "
                "holds convolution.1's model-axis all-reduce result (all-reduce, 64 KiB) next "
                "to the relu gradient (broadcast_select_fusion, 64 KiB) and its transposed "
                "copy for the weight-gradient convolution (transpose_copy_fusion.1, 64 KiB), "
                "plus the first convolution's output kept for the backward relu mask "
                "(convolution, 32 KiB) and hoisted transposes of the forward activations "
                "(transpose_copy_fusion.2/.6, 44 KiB); the model counts the transposed copies "
                "but frees the pre-relu outputs after the forward pass",
    "shard_map_pipeline": "temp 2.25x of a 4 KiB peak; inside the manual computation XLA "
                          "reuses two 512 B slots for every stage's activation (ynn_fusion.*, "
                          "wrapped_tanh.*, ppermute.*) and updates the stacked outputs in one "
                          "2 KiB buffer (bitcast_dynamic-update-slice_fusion*, psum_invariant); "
                          "the model adds the outer dot_general/transpose results around the "
                          "manual computation (%0, %3, 2 KiB each) and a separate 2 KiB buffer "
                          "for the broadcast the scatters start from",
    "conflict_mlp_deep": "temp 0.68x; XLA's scheduler hoists the weight all-gathers, which "
                         "depend only on arguments, ahead of the layers (the scheduled entry "
                         "computation starts with them), so gathered weights of many layers "
                         "are live together at its peak: the gap, 1504768 B, is 23 gathered "
                         "64 KiB w_out; the model's liveness walk keeps program order, where "
                         "each gathered weight lives only within its layer",
}
FIELDS = ("argument", "output", "temp", "total")


@dataclasses.dataclass(frozen=True)
class Row:
    """One program: estimated and measured bytes per device per field."""

    name: str
    estimate: dict[str, int]
    xla: dict[str, int]

    def ratio(self, field: str) -> float | None:
        """Estimate over XLA for ``field`` (1.0 when both are zero)."""
        mine, theirs = self.estimate[field], self.xla[field]
        return mine / theirs if theirs else (1.0 if mine == 0 else None)

    @property
    def within_tolerance(self) -> bool:
        """Whether the totals agree to ``TOLERANCE``."""
        ratio = self.ratio("total")
        return ratio is not None and abs(ratio - 1.0) <= TOLERANCE


def lower(program: Program):
    """Lower a benchmark program with shardc (propagation on, as ``jit`` does)."""
    jitted = sc.jit(program.fun, in_shardings=program.in_shardings,
                    out_shardings=program.out_shardings)
    return jitted.lower(*program.args)


def compare(program: Program) -> Row:
    """Estimate, compile and compare one program."""
    lowered = lower(program)
    estimate = lowered.memory_estimate()
    stats = lowered.compile().memory_analysis()
    mine = {"argument": estimate.argument_bytes, "output": estimate.output_bytes,
            "temp": estimate.temp_bytes, "total": estimate.total_bytes}
    theirs = {"argument": stats.argument_size_in_bytes, "output": stats.output_size_in_bytes,
              "temp": stats.temp_size_in_bytes}
    theirs["total"] = sum(theirs.values())
    return Row(program.name, mine, theirs)


def format_table(rows: list[Row]) -> str:
    """Aligned table: per field estimate/XLA bytes and ratio, then the explanation."""
    head = f"{'program':<26}" + "".join(f"{f + ' est/xla':>24} {'ratio':>6}" for f in FIELDS)
    lines = [head]
    for row in rows:
        cells = "".join(
            f"{row.estimate[f]:>11}/{row.xla[f]:<12} {_ratio(row.ratio(f)):>6}" for f in FIELDS)
        lines.append(f"{row.name:<26}{cells}")
        if not row.within_tolerance:
            lines.append(f"{'':<26}gap: {EXPLAINED.get(row.name, 'UNEXPLAINED')}")
    return "\n".join(lines) + "\n"


def _ratio(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def to_json(rows: list[Row]) -> str:
    """Rows as JSON with ratios and explanations."""
    return json.dumps([{**dataclasses.asdict(row),
                        "ratio": {f: row.ratio(f) for f in FIELDS},
                        "within_tolerance": row.within_tolerance,
                        "explanation": EXPLAINED.get(row.name)} for row in rows], indent=1)


def main(argv: list[str] | None = None) -> int:
    """Command line: print the table, optionally write JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", help=f"programs (default all: {sorted(REGISTRY)})")
    parser.add_argument("--size", default="small", choices=("small", "large"))
    parser.add_argument("--json", help="write the rows as JSON to this file")
    args = parser.parse_args(argv)
    rows = [compare(p) for p in make_programs(args.size, args.names or None)]
    sys.stdout.write(format_table(rows))
    if args.json:
        pathlib.Path(args.json).write_text(to_json(rows))
    unexplained = [r.name for r in rows if not r.within_tolerance and r.name not in EXPLAINED]
    return 1 if unexplained else 0


if __name__ == "__main__":
    sys.exit(main())
