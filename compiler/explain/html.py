"""The explain table as one self-contained HTML page (no scripts, no external files).

Each distinct sharding gets a colour, used for its rows and its device grids,
so values sharded alike read alike; values whose consumers need a collective
are highlighted and listed again at the top with the op and source line
responsible. Each row's device grid sits in a ``<details>`` element.
"""

from __future__ import annotations

import html
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from shardc.compiler.explain.table import ExplainRow, ExplainTable

_PALETTE = ("#cfe3ff", "#d4f5d4", "#ffe8c2", "#ecd9ff", "#c9f1ef", "#ffd6e0", "#f0f0b8",
            "#dcdcdc", "#bfe0c8", "#f7d2b8")
_REPLICATED = "#f4f4f4"
_STYLE = """
body { font: 13px/1.35 system-ui, sans-serif; margin: 16px; color: #222; }
h1 { font-size: 18px; margin: 0 0 6px; } h2 { font-size: 15px; margin: 18px 0 6px; }
table.values { border-collapse: collapse; width: 100%; }
table.values th { position: sticky; top: 0; background: #333; color: #fff; text-align: left;
  padding: 3px 6px; }
table.values td { padding: 2px 6px; border-bottom: 1px solid #fff; vertical-align: top; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
code { font: 12px ui-monospace, monospace; }
tr.collective td:first-child { border-left: 4px solid #d33; }
tr.collective td { font-weight: 600; }
span.coll { background: #d33; color: #fff; border-radius: 3px; padding: 0 4px; }
table.grid { border-collapse: collapse; margin: 4px 0; }
table.grid td { border: 1px solid #555; padding: 2px 8px; font: 11px monospace; text-align: center; }
.legend span { display: inline-block; padding: 2px 6px; margin: 2px; border: 1px solid #aaa;
  vertical-align: top; }
ul.colls li { margin: 2px 0; }
"""


def _colours(table: ExplainTable) -> dict[str, str]:
    colours: dict[str, str] = {}
    for row in table.rows:
        if row.sharding not in colours and row.origins:
            colours[row.sharding] = _PALETTE[len(colours) % len(_PALETTE)]
    return colours


def _row_html(row: ExplainRow, colour: str) -> str:
    cells = [f"<code>{html.escape(row.name)}</code>", html.escape(row.op),
             html.escape(_short(row.loc)), "x".join(map(str, row.shape)) or "scalar",
             html.escape(row.dtype), f"<code>{html.escape(row.sharding)}</code>",
             "x".join(map(str, row.shard_shape)) or "scalar"]
    needs = " ".join(f'<span class="coll">{html.escape(c.kind)} {c.bytes_per_device} B</span> '
                     f"at {html.escape(_short(c.loc))}" for c in row.collectives)
    grid = row.grid.format_html(colour) if row.grid is not None and row.origins else ""
    origin = html.escape(row.origin_text)
    if grid:
        origin = f"<details><summary>{origin}</summary>{grid}</details>"
    css = ' class="collective"' if row.collectives else ""
    tds = "".join(f"<td>{c}</td>" for c in cells)
    return (f'<tr{css} style="background:{colour}">{tds}<td class="num">{row.shard_bytes}</td>'
            f"<td>{origin}</td><td>{needs}</td></tr>")


def _short(loc: str | None) -> str:
    if not loc:
        return "-"
    return loc.rsplit("/", 1)[-1]


def render_page(table: ExplainTable, title: str = "shardc explain") -> str:
    """The whole page as a string."""
    colours = _colours(table)
    mesh = " x ".join(f"{name}={size}" for name, size in table.mesh_sizes.items()) or "no mesh"
    first = {}
    for row in table.rows:
        first.setdefault(row.sharding, row)
    legend = "".join(
        f'<span style="background:{c}"><code>{html.escape(s)}</code> e.g. '
        f"<code>{html.escape(first[s].name)}</code>"
        f"{first[s].grid.format_html(c) if first[s].grid is not None else ''}</span>"
        for s, c in colours.items())
    collectives = "".join(
        f'<li><span class="coll">{html.escape(n.kind)}</span> over '
        f"{html.escape(','.join(n.axes))}: {n.bytes_per_device} B/device for "
        f"<code>{html.escape(r.name)}</code> at {html.escape(n.op)} "
        f"({html.escape(_short(n.loc))}) &mdash; {html.escape(n.reason)}</li>"
        for r, n in table.collectives()) or "<li>no communication</li>"
    heads = "".join(f"<th>{h}</th>" for h in (
        "value", "op", "source", "shape", "dtype", "sharding", "shard", "bytes/dev",
        "from (user sharding per axis)", "consumer collective"))
    rows = "".join(_row_html(r, colours.get(r.sharding, _REPLICATED)) for r in table.rows)
    return (f"<!DOCTYPE html><html><head><meta charset=\"utf-8\"><title>{html.escape(title)}"
            f"</title><style>{_STYLE}</style></head><body><h1>{html.escape(title)}</h1>"
            f"<div>mesh: {html.escape(mesh)} &middot; {len(table.rows)} values &middot; origins "
            f"{html.escape(table.origin_method)}</div>"
            f"<h2>Collectives</h2><ul class=\"colls\">{collectives}</ul>"
            f"<h2>Shardings and device grids</h2><div class=\"legend\">{legend}</div>"
            f"<h2>Values</h2><table class=\"values\"><thead><tr>{heads}</tr></thead>"
            f"<tbody>{rows}</tbody></table></body></html>\n")
