"""The explain table: one row per value, why it is sharded so and what it costs.

``explain_module(module)`` propagates a copy of the module (as
``Lowered.comm_report()`` does) and lists every tensor value: the op defining
it and its source line, shape and dtype, the final sharding, the per-device
shard shape and bytes, the user sharding each of its mesh axes came from
(``origins``) and the collectives its consumers need (``shardc.compiler.cost``:
the same prediction that is checked against XLA's partitioned HLO).
Values are named as in the explained (propagated) module's printed form.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field

from jaxlib.mlir import ir

from shardc.compiler.cost.report import CommEntry, collectives_at
from shardc.compiler.diagnostics import SourceLoc, source_loc_of
from shardc.compiler.explain.grid import ShardGrid, grid_of_sharding
from shardc.compiler.explain.html import render_page
from shardc.compiler.explain.origins import (
    BODY_OPS,
    AxisOrigin,
    derive_origins,
    recorded_origins,
    user_origins,
)
from shardc.compiler.propagation.values import ModuleValues, element_bytes
from shardc.compiler.sharding.tensor import TensorSharding, format_dim
from shardc.dialects.sdy import SHARDING_ATTR

ORIGIN_METHOD = "derived"  # found by the search in ``origins``; "recorded": by propagation


@dataclass(frozen=True)
class CollectiveNeed:
    """A collective XLA inserts for a value at one of its consumers."""

    kind: str
    axes: tuple[str, ...]
    bytes_per_device: int
    op: str
    loc: str | None
    reason: str


@dataclass(frozen=True)
class ExplainRow:
    """One value of the module and everything ``explain`` knows about it."""

    name: str
    op: str
    loc: str | None
    shape: tuple[int, ...]
    dtype: str
    sharding: str
    shard_shape: tuple[int, ...]
    shard_bytes: int
    global_bytes: int
    origins: tuple[tuple[str, str | None], ...]  # (axis, origin text or None: propagation)
    collectives: tuple[CollectiveNeed, ...] = ()
    grid: ShardGrid | None = field(default=None, compare=False, repr=False)

    @property
    def origin_text(self) -> str:
        """The origins as one cell: ``data<-arg 0 (x) @ f.py:3; model<-...``."""
        if not self.origins:
            return "replicated"
        return "; ".join(f"{axis}<-{origin or 'propagation'}" for axis, origin in self.origins)

    @property
    def collective_text(self) -> str:
        """The collectives as one cell: ``all-gather 4096B @ f.py:9``."""
        return "; ".join(f"{c.kind} {c.bytes_per_device}B @ {_short(c.loc)}"
                         for c in self.collectives)

    def as_dict(self) -> dict:
        """JSON-ready fields."""
        data = asdict(self)
        data.pop("grid")
        data["origins"] = [{"axis": a, "origin": o} for a, o in self.origins]
        return data


_COLUMNS = (("value", "name"), ("op", "op"), ("source", "loc"), ("shape", "shape"),
            ("dtype", "dtype"), ("sharding", "sharding"), ("shard", "shard_shape"),
            ("bytes/dev", "shard_bytes"), ("from", "origin_text"),
            ("consumer collective", "collective_text"))


@dataclass(frozen=True)
class ExplainTable:
    """Every value's row, plus the collectives of the module in program order."""

    rows: tuple[ExplainRow, ...]
    mesh_sizes: dict[str, int]
    origin_method: str = ORIGIN_METHOD

    def filter(self, *, op: str | None = None, min_bytes: int = 0,
               source: str | None = None) -> ExplainTable:
        """Rows whose op name contains ``op``, of at least ``min_bytes`` per device,
        and whose source file contains ``source``."""
        rows = tuple(r for r in self.rows
                     if (op is None or op in r.op) and r.shard_bytes >= min_bytes
                     and (source is None or (r.loc is not None and source in r.loc)))
        return ExplainTable(rows, self.mesh_sizes, self.origin_method)

    def row(self, name: str) -> ExplainRow:
        """The row of value ``name`` (``%3``, ``%arg0``)."""
        for row in self.rows:
            if row.name == name:
                return row
        raise KeyError(name)

    def collectives(self) -> list[tuple[ExplainRow, CollectiveNeed]]:
        """Every collective with the value it moves, in program order."""
        return [(row, need) for row in self.rows for need in row.collectives]

    def format_text(self, **filters) -> str:
        """Aligned columns, one line per value (``filters`` as for ``filter``)."""
        table = self.filter(**filters) if filters else self
        cells = [[_cell(getattr(row, attr)) for _, attr in _COLUMNS] for row in table.rows]
        headers = [title for title, _ in _COLUMNS]
        widths = [max([len(h)] + [len(c[i]) for c in cells]) for i, h in enumerate(headers)]
        lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths)).rstrip()]
        lines += ["  ".join(c.ljust(w) for c, w in zip(cell, widths)).rstrip() for cell in cells]
        how = ("recorded by propagation" if self.origin_method == "recorded" else
               f"{self.origin_method} from the nearest user sharding along edges that share "
               "the axis")
        lines.append(f"{len(table.rows)} values; origins {how}")
        return "\n".join(lines) + "\n"

    def to_json(self, **filters) -> str:
        """The rows as JSON (``filters`` as for ``filter``)."""
        table = self.filter(**filters) if filters else self
        return json.dumps({"mesh": self.mesh_sizes, "origin_method": self.origin_method,
                           "rows": [r.as_dict() for r in table.rows]}, indent=1)

    def to_html(self, title: str = "shardc explain") -> str:
        """One self-contained HTML page (see ``shardc.compiler.explain.html``)."""
        return render_page(self, title)


def _short(loc: str | None) -> str:
    if not loc:
        return "?"
    path, _, rest = loc.partition(":")
    return f"{path.rsplit('/', 1)[-1]}:{rest.split(':')[0]}"


def _cell(value) -> str:
    if value is None:
        return "-"
    if isinstance(value, tuple):
        return "x".join(map(str, value)) if value else "scalar"
    return str(value)


def spec_text(sharding: TensorSharding | None) -> str:
    """A sharding without its mesh: ``[{"data"}, {}]`` (``?`` when unknown)."""
    if sharding is None:
        return "?"
    return "[" + ", ".join(map(format_dim, sharding.dims)) + "]"


def _loc_text(loc: SourceLoc | None) -> str | None:
    return f"{loc.file}:{loc.line}" if loc else None


def _needs_by_value(values: ModuleValues) -> dict[int, list[CollectiveNeed]]:
    """The predicted collectives, each attached to the value it moves or produces."""
    graph = values.graph
    needs: dict[int, list[CollectiveNeed]] = {}
    for op in range(len(graph.ops)):
        for entry in collectives_at(values, op):
            value = _moved_value(values, op, entry)
            if value is None:
                continue
            needs.setdefault(value, []).append(CollectiveNeed(
                entry.kind, entry.axes, entry.bytes_per_device, entry.op,
                _loc_text(entry.loc), entry.reason))
    return needs


def _moved_value(values: ModuleValues, op: int, entry: CommEntry) -> int | None:
    graph = values.graph
    words = entry.tensor.split()
    if len(words) >= 2 and words[0] in ("operand", "result") and words[1].isdigit():
        k = int(words[1])
        if k < len(graph.op_operands[op]):
            return graph.op_operands[op][k]
    if graph.op_results[op]:
        return graph.op_results[op][0]  # the partial sums of the op's own result
    return graph.op_operands[op][0] if graph.op_operands[op] else None


def _in_body(values: ModuleValues, value: int) -> bool:
    graph = values.graph
    op = graph.value_def[value]
    op = graph.value_owner[value] if op < 0 else graph.op_parent[op]
    while op >= 0:
        if graph.op_name[op] in BODY_OPS:
            return True
        op = graph.op_parent[op]
    return False


def build_table(module: ir.Operation, *, user_args: Sequence[bool] | None = None,
                user_results: Sequence[bool] | None = None,
                seeds_from: ir.Operation | None = None,
                recorded=None) -> ExplainTable:
    """The table of an already propagated ``module``.

    ``seeds_from`` is the module *before* propagation, whose func arguments
    with a sharding count as user-given (default: ``module`` itself).
    ``recorded`` is the ``ShardingOrigins`` propagation recorded while it
    propagated ``module`` (``origin_method`` "recorded"); without it the
    origins are derived by the graph search (``origins.derive_origins``).
    """
    values = ModuleValues(module, missing_as_replicated=True)
    if seeds_from is not None:
        given_args, given_results = _given_shardings(seeds_from)
        user_args = given_args if user_args is None else user_args
        user_results = given_results if user_results is None else user_results
    seeds = user_origins(values, user_args, user_results)
    origins = derive_origins(values, seeds)
    method = ORIGIN_METHOD
    if recorded is not None:
        origins = recorded_origins(values, seeds, recorded, origins)
        method = "recorded"
    needs = _needs_by_value(values)
    graph = values.graph
    state = ir.AsmState(module)
    mesh = values.meshes.get(values.mesh) if values.mesh else None
    sizes = dict(mesh.sizes) if mesh is not None else {}
    rows = []
    for value, shape in enumerate(graph.value_shape):
        if shape is None or _in_body(values, value):
            continue
        rows.append(_row(values, value, state, origins.get(value, []),
                         needs.get(value, []), sizes))
    return ExplainTable(tuple(rows), sizes, method)


def _given_shardings(module: ir.Operation) -> tuple[list[bool], list[bool]]:
    """Which arguments and results of the first function carry a sharding."""
    for op in module.regions[0].blocks[0].operations:
        if op.operation.name == "func.func":
            function_type = ir.FunctionType(ir.TypeAttr(op.attributes["function_type"]).value)
            found = []
            for name, count in (("arg_attrs", len(function_type.inputs)),
                                ("res_attrs", len(function_type.results))):
                if name not in op.attributes:
                    found.append([False] * count)
                else:
                    found.append([SHARDING_ATTR in ir.DictAttr(a)
                                  for a in ir.ArrayAttr(op.attributes[name])])
            return found[0], found[1]
    return [], []


def _row(values: ModuleValues, value: int, state: ir.AsmState, origins: list[AxisOrigin],
         needs: list[CollectiveNeed], sizes: dict[str, int]) -> ExplainRow:
    graph = values.graph
    ir_value = graph.values[value]
    shape = graph.value_shape[value]
    op = graph.value_def[value]
    if op >= 0:
        op_name, location = graph.op_name[op], graph.ops[op].location
    else:
        owner = graph.value_owner[value]
        op_name = "argument" if graph.op_name[owner] == "func.func" else \
            f"block arg of {graph.op_name[owner]}"
        location = ir_value.location if graph.op_name[owner] == "func.func" else \
            graph.ops[owner].location
    sharding = values.sharding(value)
    # A value on another mesh symbol (other axis names) is placed on that mesh's grid.
    own = values.meshes.get(sharding.mesh) if sharding is not None else None
    sizes = dict(own.sizes) if own is not None else sizes
    grid = grid_of_sharding(shape, sharding, sizes) if sizes else None
    shard = grid.shard_shape() if grid else tuple(shape)
    size = element_bytes(ir_value.type)
    shard_bytes = size
    for n in shard:
        shard_bytes *= n
    global_bytes = size
    for n in shape:
        global_bytes *= n
    return ExplainRow(
        name=ir_value.get_name(state),
        op=op_name,
        loc=_loc_text(source_loc_of(location)),
        shape=tuple(shape),
        dtype=str(ir.ShapedType(ir_value.type).element_type),
        sharding=spec_text(sharding),
        shard_shape=tuple(shard),
        shard_bytes=shard_bytes,
        global_bytes=global_bytes,
        origins=tuple((o.axis, str(o.origin) if o.origin else None) for o in origins),
        collectives=tuple(needs),
        grid=grid,
    )
