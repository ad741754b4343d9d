"""The end-to-end comparison as a markdown table, from ``bench/e2e.py``'s JSON rows.

Shared by ``bench/e2e.py`` (printed) and ``bench/render_readme.py`` (README),
so both show the same columns with the same formatting. The cost-aware columns
appear when the rows have that route (``bench/e2e.py`` without ``--no-cost-aware``);
``transformer_table`` formats the cost-aware lowering times on the unrolled
transformer.
"""

from __future__ import annotations

import math
from typing import Any

from shardc.compiler.cost.step_time import human_seconds

COST_AWARE = "cost-aware"  # the route's key in the rows' per-route dicts
HEADER = (
    "| program | max rel. error | output shardings match | collective bytes / device "
    "(jax) | memory / device (jax) | lower (jax) | compile (jax) | per call (jax) |"
)
ALIGN = "|---|---:|:---:|---:|---:|---:|---:|---:|"
COST_AWARE_HEADER = (
    " cost-aware bytes (vs jax) | cost-aware memory (vs jax) | cost-aware lower (vs shardc) |"
)
COST_AWARE_ALIGN = "---:|---:|---:|"
# The ratio columns the geometric-mean row averages, after the collective bytes.
RATIO_COLUMNS = ("memory_ratio", "lower_ratio", "compile_ratio", "call_ratio")
COST_AWARE_RATIO_COLUMNS = (
    "cost_aware_bytes_ratio", "cost_aware_memory_ratio", "cost_aware_lower_ratio"
)
FOOTNOTE = (
    "Ratios are shardc / jax.jit, measured in the same process on the same inputs "
    "(< 1: shardc better); jax.jit's own figure in parentheses. Memory per device = "
    "argument + output + temp - alias bytes of XLA's memory analysis. Collective bytes are "
    "static (a collective in a loop body counts once). Times: medians; per call includes "
    "dispatch."
)
COST_AWARE_FOOTNOTE = (
    'cost-aware: shardc with `propagation="cost-aware"`; its collective bytes and memory '
    "over jax.jit's, its lowering time over shardc's default (Shardy-compatible) lowering."
)
TRANSFORMER_TITLE = (
    'Lowering time of `propagation="cost-aware"` against `propagation="shardy"` (both shardc) '
    "on the unrolled transformer of `bench/propagation.py`; evaluations: the search's "
    "propagations + cost predictions of the whole module + of regions (at most 128 ops):"
)
TRANSFORMER_HEADER = (
    "| layers | ops | lower, shardy | lower, cost-aware | cost-aware / shardy | evaluations "
    "| predicted bytes / device, shardy → cost-aware |"
)
TRANSFORMER_ALIGN = "|---:|---:|---:|---:|---:|---:|---:|"


def human_bytes(count: float) -> str:
    """``1536`` -> ``1.5 KiB``."""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(count) < 1024 or unit == "GiB":
            return f"{count:.0f} {unit}" if unit == "B" else f"{count:.1f} {unit}"
        count /= 1024
    raise AssertionError("unreachable")


def format_ratio(value: float | None) -> str:
    """``0.987`` -> ``0.99×``; ``None`` (jax's figure is zero, shardc's not) -> ``∞``."""
    if value is None:
        return "∞"
    return f"{value:.2f}×"


def format_error(value: float | None) -> str:
    if value is None:
        return "—"
    return "0" if value == 0 else f"{value:.1e}"


def one_line(error: str) -> str:
    """An error's first line, escaped for a table cell, at most 120 characters."""
    message = error.splitlines()[0].replace("|", "\\|")
    return message if len(message) <= 120 else message[:117] + "..."


def has_cost_aware(rows: list[dict[str, Any]]) -> bool:
    """Whether any row measured the cost-aware route (the table then has its columns)."""
    return any(COST_AWARE in row.get("collective_bytes", {}) for row in rows)


def format_row(row: dict[str, Any], cost_aware: bool = False) -> str:
    """One program's markdown row (with the cost-aware columns when ``cost_aware``; "—"
    there when the row lacks that route); a failed program shows its error instead of
    figures."""
    if row.get("error"):
        empty = " |" * (9 if cost_aware else 6)
        return f"| {row['name']} | **failed**: {one_line(row['error'])} |{empty}"
    mismatched = ", ".join(row["mismatched_outputs"])
    match = "yes" if row["output_shardings_match"] else f"no: {mismatched}"
    calls = row.get("call_microseconds")
    measured = COST_AWARE in row["collective_bytes"]
    error = format_error(row["max_rel_error"])
    if cost_aware:
        error += " / " + (format_error(row["cost_aware_max_rel_error"]) if measured else "—")
    cells = [
        row["name"],
        error,
        match,
        f"{format_ratio(row['collective_bytes_ratio'])} "
        f"({human_bytes(row['collective_bytes']['jax'])})",
        f"{format_ratio(row['memory_ratio'])} ({human_bytes(row['memory_bytes']['jax'])})",
        f"{format_ratio(row['lower_ratio'])} ({human_seconds(row['lower_seconds']['jax'])})",
        f"{format_ratio(row['compile_ratio'])} ({human_seconds(row['compile_seconds']['jax'])})",
        f"{format_ratio(row['call_ratio'])} ({human_seconds(calls['jax'] * 1e-6)})"
        if calls
        else "—",
    ]
    if cost_aware:
        cells += [format_ratio(row[c]) if measured else "—" for c in COST_AWARE_RATIO_COLUMNS]
    return "| " + " | ".join(cells) + " |"


def geometric_mean(values: list[float]) -> float | None:
    positive = [v for v in values if v is not None and v > 0 and math.isfinite(v)]
    if not positive:
        return None
    return math.exp(sum(math.log(v) for v in positive) / len(positive))


def summary_row(rows: list[dict[str, Any]], cost_aware: bool = False) -> str:
    """Geometric means of each ratio column over the programs that ran."""
    ok = [row for row in rows if not row.get("error")]
    columns = ("collective_bytes_ratio", *RATIO_COLUMNS)
    columns += COST_AWARE_RATIO_COLUMNS if cost_aware else ()
    means = [geometric_mean([row.get(column) for row in ok]) for column in columns]
    cells = ["**geometric mean**", "", "", *(format_ratio(m) if m else "—" for m in means)]
    return "| " + " | ".join(cells) + " |"


def markdown_table(rows: list[dict[str, Any]]) -> str:
    """The whole table: header, one row per program, the geometric means."""
    cost_aware = has_cost_aware(rows)
    header, align = HEADER, ALIGN
    if cost_aware:
        header = header.replace("max rel. error", "max rel. error (shardc / cost-aware)")
        header, align = header + COST_AWARE_HEADER, align + COST_AWARE_ALIGN
    lines = [header, align, *(format_row(row, cost_aware) for row in rows)]
    return "\n".join([*lines, summary_row(rows, cost_aware)])


def footnote(rows: list[dict[str, Any]]) -> str:
    """What the table's figures are (and its cost-aware columns, when it has them)."""
    return FOOTNOTE + (" " + COST_AWARE_FOOTNOTE if has_cost_aware(rows) else "")


def transformer_table(rows: list[dict[str, Any]]) -> str:
    """The cost-aware lowering time on the unrolled transformer, one row per size."""
    lines = [TRANSFORMER_HEADER, TRANSFORMER_ALIGN]
    for row in rows:
        if row.get("error"):
            lines.append(f"| {row['layers']} | **failed**: {one_line(row['error'])} |" + " |" * 5)
            continue
        seconds, predicted = row["lower_seconds"], row["predicted_bytes"]
        cells = [
            str(row["layers"]),
            str(row["ops"]),
            human_seconds(seconds["shardy"]),
            human_seconds(seconds[COST_AWARE]),
            format_ratio(row["ratio"]),
            f"{row['evaluations']} + {row.get('region_evaluations', 0)}",
            f"{human_bytes(predicted['shardy'])} → {human_bytes(predicted[COST_AWARE])}",
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)
