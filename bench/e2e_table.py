"""The end-to-end comparison as a markdown table, from ``bench/e2e.py``'s JSON rows.

Shared by ``bench/e2e.py`` (printed) and ``bench/render_readme.py`` (README),
so both show the same columns with the same formatting.
"""

from __future__ import annotations

import math
from typing import Any

HEADER = (
    "| program | max rel. error | output shardings match | collective bytes / device "
    "(jax) | memory / device (jax) | lower (jax) | compile (jax) | per call (jax) |"
)
ALIGN = "|---|---:|:---:|---:|---:|---:|---:|---:|"
FOOTNOTE = (
    "Ratios are shardc / jax.jit, measured in the same process on the same inputs "
    "(< 1: shardc better); jax.jit's own figure in parentheses. Memory per device = "
    "argument + output + temp - alias bytes of XLA's memory analysis. Collective bytes are "
    "static (a collective in a loop body counts once). Times: medians; per call includes "
    "dispatch."
)


def human_bytes(count: float) -> str:
    """``1536`` -> ``1.5 KiB``."""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(count) < 1024 or unit == "GiB":
            return f"{count:.0f} {unit}" if unit == "B" else f"{count:.1f} {unit}"
        count /= 1024
    raise AssertionError("unreachable")


def human_seconds(seconds: float) -> str:
    """``0.0123`` -> ``12.3 ms``."""
    if seconds >= 1:
        return f"{seconds:.2f} s"
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.1f} ms"
    return f"{seconds * 1e6:.0f} µs"


def format_ratio(value: float | None) -> str:
    """``0.987`` -> ``0.99×``; ``None`` (jax's figure is zero, shardc's not) -> ``∞``."""
    if value is None:
        return "∞"
    return f"{value:.2f}×"


def format_error(value: float | None) -> str:
    if value is None:
        return "—"
    return "0" if value == 0 else f"{value:.1e}"


def format_row(row: dict[str, Any]) -> str:
    """One program's markdown row; a failed program shows its error instead of figures."""
    if row.get("error"):
        message = row["error"].splitlines()[0].replace("|", "\\|")
        if len(message) > 120:
            message = message[:117] + "..."
        return f"| {row['name']} | **failed**: {message} |  |  |  |  |  |  |"
    mismatched = ", ".join(row["mismatched_outputs"])
    match = "yes" if row["output_shardings_match"] else f"no: {mismatched}"
    calls = row.get("call_microseconds")
    cells = [
        row["name"],
        format_error(row["max_rel_error"]),
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
    return "| " + " | ".join(cells) + " |"


def geometric_mean(values: list[float]) -> float | None:
    positive = [v for v in values if v is not None and v > 0 and math.isfinite(v)]
    if not positive:
        return None
    return math.exp(sum(math.log(v) for v in positive) / len(positive))


def summary_row(rows: list[dict[str, Any]]) -> str:
    """Geometric means of each ratio column over the programs that ran."""
    ok = [row for row in rows if not row.get("error")]
    columns = ("memory_ratio", "lower_ratio", "compile_ratio", "call_ratio")
    means = [geometric_mean([row.get(column) for row in ok]) for column in columns]
    bytes_mean = geometric_mean([row["collective_bytes_ratio"] for row in ok])
    cells = ["**geometric mean**", "", "", format_ratio(bytes_mean) if bytes_mean else "—"]
    cells += [format_ratio(mean) if mean else "—" for mean in means]
    return "| " + " | ".join(cells) + " |"


def markdown_table(rows: list[dict[str, Any]]) -> str:
    """The whole table: header, one row per program, the geometric means."""
    lines = [HEADER, ALIGN, *(format_row(row) for row in rows), summary_row(rows)]
    return "\n".join(lines)
