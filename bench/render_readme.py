"""Regenerate the README's "How shardc compares" section from ``bench/e2e.py``'s JSON.

Rewrites only the text between the ``<!-- e2e:start -->`` and
``<!-- e2e:end -->`` markers (the table, its footnote, the run's environment
and, when the run measured it, the cost-aware lowering time on the
transformer) and draws ``docs/e2e_collective_bytes.png``, the
collective-bytes ratio per program. Needs matplotlib
(``pip install -e '.[bench]'``).

    python -m bench.e2e && python -m bench.render_readme [--json PATH] [--readme PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib

from bench import e2e_table

ROOT = pathlib.Path(__file__).resolve().parents[1]

START, END = "<!-- e2e:start -->", "<!-- e2e:end -->"
PLOT = ROOT / "docs" / "e2e_collective_bytes.png"


def plot_collective_bytes(rows: list[dict], path: pathlib.Path, size: str) -> None:
    """Horizontal bars of shardc / jax.jit collective bytes per program, 1 marked."""
    import matplotlib

    matplotlib.use("Agg")  # files only, no display
    import matplotlib.pyplot as plt

    ran = [row for row in rows if not row.get("error")]
    names = [row["name"] for row in ran]
    # A program where only shardc communicates has no finite ratio: draw it
    # off the right edge, labelled.
    finite = [row["collective_bytes_ratio"] for row in ran if row["collective_bytes_ratio"]]
    right = max([1.25, *(1.1 * r for r in finite)])
    values = [row["collective_bytes_ratio"] or right for row in ran]
    colours = ["tab:green" if v < 0.995 else "tab:gray" if v <= 1.005 else "tab:red"
               for v in values]  # fmt: skip


    figure, axes = plt.subplots(figsize=(7.5, 0.42 * len(ran) + 1.8), dpi=120)
    positions = range(len(ran))[::-1]  # first program on top
    axes.barh(list(positions), values, color=colours, height=0.6)
    axes.axvline(1.0, color="black", linewidth=1)
    for y, row, value in zip(positions, ran, values):
        jax_bytes = e2e_table.human_bytes(row["collective_bytes"]["jax"])
        label = f"{e2e_table.format_ratio(row['collective_bytes_ratio'])}  (jax.jit {jax_bytes})"
        axes.text(min(value, right) + 0.01 * right, y, label, va="center", fontsize=8)
    from matplotlib.patches import Patch

    legend = [Patch(color=c, label=t) for c, t in (
        ("tab:green", "shardc moves less"), ("tab:gray", "same"), ("tab:red", "shardc moves more"),
    )]  # fmt: skip
    axes.legend(handles=legend, loc="upper center", bbox_to_anchor=(0.5, -0.13), ncol=3, fontsize=8)
    axes.set_yticks(list(positions), names, fontsize=9)
    axes.set_xlim(0, right * 1.45)  # room for the labels
    axes.set_xlabel("collective bytes per device, shardc / jax.jit (lower is better)")
    axes.set_title(f"Communication of shardc vs jax.jit, {size} sizes, 8 CPU devices", fontsize=10)
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path)
    plt.close(figure)


def section(results: dict, plot_path: pathlib.Path, readme: pathlib.Path) -> str:
    """The markdown between the markers."""
    env = results["environment"]
    plot = pathlib.Path(os.path.relpath(plot_path, readme.parent)).as_posix()
    return "\n".join([
        "",
        f"`python -m bench.e2e` ({env['size']} sizes; {env['devices']} {env['platform']} "
        f"devices on {env['cpu_count']} cores; jax {env['jax']}; shardc {env['git']}; "
        f"{env['date']}):",
        "",
        e2e_table.markdown_table(results["rows"]),
        "",
        e2e_table.footnote(results["rows"]),
        "",
        f"![collective bytes per device, shardc / jax.jit]({plot})",
        "",
        *transformer_section(results.get("transformer")),
    ])  # fmt: skip


def transformer_section(rows: list[dict] | None) -> list[str]:
    """The cost-aware lowering-time table's lines (none when the run skipped it)."""
    if not rows:
        return []
    return [e2e_table.TRANSFORMER_TITLE, "", e2e_table.transformer_table(rows), ""]


def splice(text: str, body: str, start: str = START, end: str = END) -> str:
    """Replace what lies between the markers of ``text`` with ``body``."""
    if text.count(start) != 1 or text.count(end) != 1 or text.index(start) > text.index(end):
        raise SystemExit(f"README must contain {start} ... {end} exactly once, in that order")
    head, rest = text.split(start)
    _, tail = rest.split(end)
    return head + start + body + end + tail


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", default=str(ROOT / "bench" / "e2e.json"))
    parser.add_argument("--readme", default=str(ROOT / "README.md"))
    parser.add_argument("--plot", default=str(PLOT))
    options = parser.parse_args(argv)

    results = json.loads(pathlib.Path(options.json).read_text())
    readme, plot_path = pathlib.Path(options.readme).resolve(), pathlib.Path(options.plot).resolve()
    plot_collective_bytes(results["rows"], plot_path, results["environment"]["size"])
    readme.write_text(splice(readme.read_text(), section(results, plot_path, readme)))
    print(f"wrote {plot_path} and the e2e section of {readme}")


if __name__ == "__main__":
    main()
