"""Sharding origins: which user sharding each propagated axis came from.

Reproduces Shardy's ``debug-sharding-origins`` option of the propagation
passes (``SourceShardingHandler`` in Shardy's ``debugging/source_sharding.cc``,
the variant jaxlib 0.10.2 ships: edge sources are read from the old
*shardings*, not from the factor projections).

Before propagation every user sharding names its own axes: func argument
``i`` -> ``input: i``, the value returned as func result ``i`` ->
``output: i``, the result of the ``k``-th ``sdy.sharding_constraint`` (program
order) -> ``constraint_k``, the data-flow edges of the ``k``-th
``sdy.manual_computation`` -> ``mc_k_input: i`` / ``mc_k_output: i``. After
every propagation step the driver reports the step's values (operands then
results), their shardings before and after; ``OriginRecorder.step`` copies the
origin of each newly added axis from the first value that had that axis
before the step. The func-result step reports the returned value as both
operand and result (Shardy's quirk), so a func result shares its returned
value's origins.

``OriginRecorder.finish`` turns the per-value maps into the final origins
(``self`` where an argument, result or constraint keeps its own user axes)
and, if asked, writes them as Shardy does: ``sdy.sharding_origins`` on func
argument/result dicts (a dictionary), on ``sdy.sharding_constraint`` and
``sdy.data_flow_edge`` (a dictionary), on other ops (an array, one
dictionary per result), plus ``sdy.sharding_origin_name`` on constraints and
manual computations.

The recorder only reads the store and never feeds the driver's step memo, so
shardings (and memo hits) are the same with or without it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Union

from jaxlib.mlir import ir

from shardc.compiler.propagation.graph import PropagationGraph
from shardc.compiler.propagation.ir_access import (
    EDGE_OP,
    MANUAL_OP,
    ShardingStore,
    _dict_entries,
)
from shardc.compiler.propagation.projection import AXES
from shardc.compiler.sharding.axes import AxisRef, can_merge, contains, is_strict_prefix, merge
from shardc.compiler.sharding.tensor import TensorSharding
from shardc.dialects.sdy import ORIGIN_NAME_ATTR, ORIGINS_ATTR

_CONSTRAINT = "sdy.sharding_constraint"
_FUNC = "func.func"

# Internal origin: (kind, index, source id); kinds as in Shardy.
INPUT, OUTPUT, CONSTRAINT, MC_INPUT, MC_OUTPUT = range(5)

#: Public origin of one axis: ``"self"``, ``("input", n)``, ``("output", n)``,
#: ``("constraint", "constraint_k")``, ``("manual_input", "mc_k", n)`` or
#: ``("manual_output", "mc_k", n)``.
Origin = Union[str, tuple]


def _origin_text(origin: tuple[int, int, int]) -> str:
    kind, index, source = origin
    if kind == INPUT:
        return f"input: {index}"
    if kind == OUTPUT:
        return f"output: {index}"
    if kind == CONSTRAINT:
        return f"constraint_{source}"
    return f"mc_{source}_{'input' if kind == MC_INPUT else 'output'}: {index}"


def _public(text: str) -> Origin:
    """The Python form of an origin string."""
    if text == "self":
        return "self"
    if text.startswith("input: "):
        return ("input", int(text[7:]))
    if text.startswith("output: "):
        return ("output", int(text[8:]))
    if text.startswith("constraint_"):
        return ("constraint", text)
    name, _, index = text.partition(": ")
    mc, _, kind = name.rpartition("_")
    return ("manual_" + kind, mc, int(index))


def axis_key(axis: AxisRef) -> str:
    """The dictionary key Shardy uses for ``axis``: its text without quotes."""
    return str(axis).replace('"', "")


def factor_axes(projections) -> list[dict[int, tuple[AxisRef, ...]]]:
    """Each projection's factor axes, copied before a strategy expands them."""
    return [{f: rec[AXES] for f, rec in p.factors.items()} for p in projections]


def _prefix_or_equal(first: tuple[AxisRef, ...], second: tuple[AxisRef, ...]) -> bool:
    return first == second or is_strict_prefix(first, second)


def factor_edges(before: list[dict[int, tuple[AxisRef, ...]]], after, mappings,
                 n: int) -> tuple:
    """Per tensor, the newly added axes and the tensor each came from (Shardy's
    ``createSourceMap``): ``((axis, source index), ...)`` per tensor.

    A changed factor's source is the first operand, else result, whose old
    factor axes start with all of its new axes. Only the last old axis (if
    replaced by a longer sub-axis) and the axes after the old ones count as
    new; consecutive sub-axes of two factors of one dimension are merged.
    """
    out = []
    total = len(before)
    for i, mapping in enumerate(mappings):
        edges: dict[AxisRef, int] = {}
        old_i, new_i = before[i], after[i].factors
        for dim_factors in mapping:
            previous = None
            for f in dim_factors:
                old = old_i[f]
                new = new_i[f][AXES]
                if old == new:
                    continue
                last = new[-1]
                if previous is not None and can_merge(previous, last):
                    edges.pop(previous, None)
                    last = merge(previous, last)
                previous = new[-1]
                newly = new[:-1] + (last,)
                source = -1
                for k in range(total):
                    if k == n and source >= 0:
                        break
                    axes = before[k].get(f)
                    if axes is not None and _prefix_or_equal(new, axes):
                        source = k
                        break
                if source < 0:
                    continue
                index = len(old) - 1
                if old and index < len(newly) and old[index] != newly[index]:
                    edges.setdefault(newly[index], source)
                for axis in newly[len(old):]:
                    edges.setdefault(axis, source)
        out.append(tuple(edges.items()))
    return tuple(out)


@dataclass
class FuncOrigins:
    """Origins of one func's arguments and results: index -> axis -> origin."""

    args: dict[int, dict[str, Origin]] = field(default_factory=dict)
    results: dict[int, dict[str, Origin]] = field(default_factory=dict)


@dataclass
class ShardingOrigins:
    """Per-axis origins after propagation, keyed by value, no attribute parsing.

    ``funcs[name].args[i]`` / ``.results[i]``: func argument / result ``i``;
    ``ops[(op, k)]``: result ``k`` of ``op`` (an ``ir.Operation``). Each maps
    an axis key (``"x"``, ``"x:(1)2"``) to an ``Origin``. ``args``/``results``
    are those of the main func (the only func, or ``@main``). Only values
    Shardy would annotate appear (those that had or received axes).
    """

    funcs: dict[str, FuncOrigins] = field(default_factory=dict)
    ops: dict[tuple[ir.Operation, int], dict[str, Origin]] = field(default_factory=dict)
    main: str = "main"

    @property
    def args(self) -> dict[int, dict[str, Origin]]:
        """The main func's argument origins."""
        return self.funcs.get(self.main, FuncOrigins()).args

    @property
    def results(self) -> dict[int, dict[str, Origin]]:
        """The main func's result origins."""
        return self.funcs.get(self.main, FuncOrigins()).results

    def of_op(self, op: ir.Operation | ir.OpView, index: int = 0) -> dict[str, Origin] | None:
        """The origins of result ``index`` of ``op`` (None when not annotated)."""
        return self.ops.get((op.operation, index))


class OriginRecorder:
    """Keeps ``value -> axis -> origin`` up to date while the driver runs."""

    def __init__(self, graph: PropagationGraph, store: ShardingStore,
                 constraints: set[int] | None = None):
        self.graph = graph
        self.store = store
        self.origins: dict[int, dict[AxisRef, tuple[int, int, int]]] = {}
        self.constraint_names: dict[int, str] = {}
        self.manual_names: dict[int, str] = {}
        self._prepare(constraints)

    # ------------------------------------------------------------------ prepare
    def _save(self, sharding: TensorSharding | None, origin: tuple, value: int) -> None:
        if sharding is None:
            return
        for dim in sharding.dims:
            for axis in dim.axes:
                self.origins.setdefault(value, {}).setdefault(axis, origin)

    def _prepare(self, constraints: set[int] | None) -> None:
        # Shardy's order matters (an axis keeps its first origin): constraints,
        # then manual computations, then func inputs and outputs; a constraint's
        # operand and a manual computation's operand that already carry a
        # sharding are credited to that constraint or computation.
        graph, store = self.graph, self.store
        storage = store.storage
        source = 0
        for op, name in enumerate(graph.op_name):
            if name != _CONSTRAINT or graph.erased[op]:
                continue
            if constraints is not None and hash(graph.ops[op]) not in constraints:
                continue
            result = graph.op_results[op][0]
            origin = (CONSTRAINT, 0, source)
            self._save(store.get(result), origin, result)
            operand = storage[graph.op_operands[op][0]]
            self._save(store.get(operand), origin, operand)
            self.constraint_names[op] = f"constraint_{source}"
            source += 1
        source = 0
        for op, name in enumerate(graph.op_name):
            if name != MANUAL_OP or op not in store.manual:
                continue
            _, ins, outs = store.manual[op]
            if graph.op_blocks[op]:
                for k, arg in enumerate(graph.op_blocks[op][0][0]):
                    edge = store.edge_of_value(arg)
                    if edge >= 0 and k < len(ins):
                        origin = (MC_INPUT, k, source)
                        self._save(ins[k], origin, graph.op_results[edge][0])
                        if k < len(graph.op_operands[op]):
                            operand = storage[graph.op_operands[op][k]]
                            self._save(store.get(operand), origin, operand)
            for k, result in enumerate(graph.op_results[op]):
                edge = store.edge_of_value(result)
                if edge >= 0 and k < len(outs):
                    self._save(outs[k], (MC_OUTPUT, k, source), graph.op_results[edge][0])
            self.manual_names[op] = f"mc_{source}"
            source += 1
        for func in store.funcs:
            blocks = graph.op_blocks[func]
            if not blocks:
                continue
            for k, arg in enumerate(blocks[0][0]):
                self._save(store.get(arg), (INPUT, k, 0), arg)
            ret = blocks[0][1][-1] if blocks[0][1] else -1
            if ret < 0:
                continue
            slots = store.func_results[func]
            for k, value in enumerate(graph.op_operands[ret]):
                if k < len(slots):
                    self._save(store.value[slots[k]], (OUTPUT, k, 0), value)

    # ------------------------------------------------------------------ steps
    def step(self, values: tuple[int, ...] | list[int], edges: tuple) -> None:
        """Record a step that updated something: ``edges`` from ``factor_edges``."""
        origins, storage = self.origins, self.store.storage
        for value, value_edges in zip(values, edges):
            for axis, k in value_edges:
                known = origins.setdefault(value, {})
                if axis in known:
                    continue
                origin = self._lookup(storage[values[k]], axis)
                if origin is not None:
                    known[axis] = origin

    def _lookup(self, value: int, axis: AxisRef) -> tuple | None:
        known = self.origins.get(value)
        if known is None:
            return None
        origin = known.get(axis)
        if origin is not None:
            return origin
        # A split or merged sub-axis: the first related axis's origin.
        for other, candidate in known.items():
            if contains(other, axis) or contains(axis, other):
                return candidate
        return None

    # ------------------------------------------------------------------ results
    def _enclosing_func(self, op: int) -> int:
        graph = self.graph
        while op >= 0 and graph.op_name[op] != _FUNC:
            op = graph.op_parent[op]
        return op

    def finish(self, *, write: bool) -> ShardingOrigins:
        """Final origins (``self`` applied); written to the IR when ``write``."""
        graph = self.graph
        func_args: dict[int, dict[int, dict[str, str]]] = {}
        func_results: dict[int, dict[int, dict[str, str]]] = {}
        op_dicts: dict[int, dict[str, str]] = {}          # single-dict ops
        op_arrays: dict[int, dict[int, dict[str, str]]] = {}  # per-result ops
        for value, axes in self.origins.items():
            defining = graph.value_def[value]
            owner = defining if defining >= 0 else graph.value_owner[value]
            if graph.erased[owner]:
                continue
            func = self._enclosing_func(owner)
            if func < 0:
                continue
            entries = {axis_key(a): _origin_text(o) for a, o in axes.items()}
            blocks = graph.op_blocks[func]
            ret = blocks[0][1][-1] if blocks and blocks[0][1] else -1
            for user, index in graph.uses[value]:
                if user == ret:
                    func_results.setdefault(func, {})[index] = dict(entries)
                    break
            name = graph.op_name[owner]
            if defining < 0:
                if owner == func:
                    func_args.setdefault(func, {})[graph.value_arg_index[value]] = dict(entries)
                continue
            if name in (_CONSTRAINT, EDGE_OP):
                op_dicts[owner] = dict(entries)
            else:
                op_arrays.setdefault(owner, {})[graph.value_arg_index[value]] = dict(entries)
        # Shardy's overrideOriginsToSelf.
        for op, entries in op_dicts.items():
            own = self.constraint_names.get(op)
            if own is None and graph.op_name[op] == EDGE_OP:
                own = self._manual_edge_name(op)
            if own is not None:
                _to_self(entries, own)
        for func, args in func_args.items():
            for k, entries in args.items():
                _to_self(entries, f"input: {k}")
        for func, results in func_results.items():
            for k, entries in results.items():
                _to_self(entries, f"output: {k}")
        if write:
            self._write(func_args, func_results, op_dicts, op_arrays)
        return self._public(func_args, func_results, op_dicts, op_arrays)

    def _manual_edge_name(self, edge: int) -> str | None:
        graph = self.graph
        owner_value = graph.op_operands[edge][0]
        owner = graph.value_owner[owner_value]
        name = self.manual_names.get(owner)
        if name is None:
            return None
        kind = "input" if graph.value_def[owner_value] == -1 else "output"
        return f"{name}_{kind}: {graph.value_arg_index[owner_value]}"

    def _func_name(self, func: int) -> str:
        attrs = self.graph.ops[func].attributes
        return ir.StringAttr(attrs["sym_name"]).value if "sym_name" in attrs else ""

    def _public(self, func_args, func_results, op_dicts, op_arrays) -> ShardingOrigins:
        graph = self.graph
        out = ShardingOrigins()
        funcs = [f for f in self.store.funcs if not graph.erased[f]]
        top = [f for f in funcs if graph.op_parent[f] == -1]
        if len(top) == 1:
            out.main = self._func_name(top[0])
        for func in funcs:
            entry = out.funcs.setdefault(self._func_name(func), FuncOrigins())
            for k, entries in sorted(func_args.get(func, {}).items()):
                entry.args[k] = {a: _public(t) for a, t in sorted(entries.items())}
            for k, entries in sorted(func_results.get(func, {}).items()):
                entry.results[k] = {a: _public(t) for a, t in sorted(entries.items())}
        for op, entries in op_dicts.items():
            out.ops[(graph.ops[op], 0)] = {a: _public(t) for a, t in sorted(entries.items())}
        for op, per_result in op_arrays.items():
            for k, entries in per_result.items():
                out.ops[(graph.ops[op], k)] = {a: _public(t) for a, t in sorted(entries.items())}
        return out

    def _write(self, func_args, func_results, op_dicts, op_arrays) -> None:
        graph = self.graph
        context = graph.module.context

        def dict_attr(entries: dict[str, str]) -> ir.Attribute:
            return ir.DictAttr.get({k: ir.StringAttr.get(v, context) for k, v in entries.items()},
                                   context=context)

        for op, name in self.constraint_names.items():
            if not graph.erased[op]:
                graph.ops[op].attributes[ORIGIN_NAME_ATTR] = ir.StringAttr.get(name, context)
        for op, name in self.manual_names.items():
            if not graph.erased[op]:
                graph.ops[op].attributes[ORIGIN_NAME_ATTR] = ir.StringAttr.get(name, context)
        for op, entries in op_dicts.items():
            graph.ops[op].attributes[ORIGINS_ATTR] = dict_attr(entries)
        empty = ir.DictAttr.get({}, context=context)
        for op, per_result in op_arrays.items():
            items = [empty] * len(graph.op_results[op])
            for k, entries in per_result.items():
                items[k] = dict_attr(entries)
            graph.ops[op].attributes[ORIGINS_ATTR] = ir.ArrayAttr.get(items, context=context)
        for func, args in func_args.items():
            self._write_func_list(func, "arg_attrs", len(graph.op_blocks[func][0][0]),
                                  {k: dict_attr(e) for k, e in args.items()})
        for func, results in func_results.items():
            count = len(self.store.func_results[func])
            self._write_func_list(func, "res_attrs", count,
                                  {k: dict_attr(e) for k, e in results.items()})

    def _write_func_list(self, func: int, list_name: str, count: int,
                         updates: dict[int, ir.Attribute]) -> None:
        op = self.graph.ops[func]
        old = list(ir.ArrayAttr(op.attributes[list_name])) if list_name in op.attributes else []
        new = []
        for k in range(count):
            entries = _dict_entries(old[k]) if k < len(old) else {}
            if k in updates:
                entries[ORIGINS_ATTR] = updates[k]
            new.append(ir.DictAttr.get(entries, context=op.context))
        op.attributes[list_name] = ir.ArrayAttr.get(new, context=op.context)


def _to_self(entries: dict[str, str], own: str) -> None:
    for key, text in entries.items():
        if text == own:
            entries[key] = "self"


__all__ = ["ORIGINS_ATTR", "ORIGIN_NAME_ATTR", "FuncOrigins", "Origin", "OriginRecorder",
           "ShardingOrigins", "axis_key"]
