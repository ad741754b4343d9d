"""Where each value's sharding came from: the user sharding behind every mesh axis.

Propagation moves a user's shardings (function arguments and results,
``sharding_constraint`` / ``reshard`` ops, ``shard_map`` in/out specs) along
def-use edges. ``derive_origins`` recovers, for every value and every mesh
axis its sharding uses, the *nearest* user sharding that uses the same axis
and is connected to the value by a path of values that all use that axis: a
breadth-first search per axis, from every user sharding at once, over the
edges propagation itself follows (an op's operands and results, a region's
block arguments and terminator operands and the op owning them). This is a
derivation after the fact, not a record kept by propagation: where
propagation resolved a conflict the search names the closest candidate, and
an axis no user sharding reaches is reported as chosen by propagation.

Where the module was *not* propagated yet, ``explain`` propagates a copy with
the engine's origin recording (``propagate(record_origins=True)``, Shardy's
``debug-sharding-origins``) and ``recorded_origins`` reads the exact origins
from that record instead. ``Lowered.explain()`` gets ``Lowered.module``,
which ``jit(...).lower()`` has already propagated (and exported: constraints
are ``sdy.reshard`` ops by then); re-propagating it records nothing new, and
the module before propagation is not kept, so there the derivation is used.
The table says which (``ExplainTable.origin_method``: ``recorded`` or
``derived``).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from jaxlib.mlir import ir

from shardc.compiler.diagnostics import SourceLoc, source_loc_of
from shardc.compiler.propagation.manual import MANUAL_OP
from shardc.compiler.propagation.values import ModuleValues
from shardc.dialects.sdy import ORIGIN_NAME_ATTR

USER_OPS = ("sdy.sharding_constraint", "sdy.reshard")
# Ops whose regions compute on scalars (reduction bodies): no sharding flows there.
BODY_OPS = frozenset({
    "stablehlo.all_reduce", "stablehlo.map", "stablehlo.reduce", "stablehlo.reduce_scatter",
    "stablehlo.reduce_window", "stablehlo.scatter", "stablehlo.select_and_scatter",
    "stablehlo.sort",
})
_STRUCTURE = frozenset({"func.func", "builtin.module", "sdy.mesh"})


@dataclass(frozen=True)
class Origin:
    """A user-given sharding: what it is attached to and where the user wrote it."""

    kind: str  # "argument", "result", "constraint", "shard_map"
    label: str  # e.g. "arg 3 (x)", "sdy.sharding_constraint"
    loc: SourceLoc | None
    value: int  # the graph value carrying it

    def __str__(self) -> str:
        return f"{self.label} @ {self.loc.file.rsplit('/', 1)[-1]}:{self.loc.line}" \
            if self.loc else self.label


@dataclass(frozen=True)
class AxisOrigin:
    """One axis of a value's sharding and the user sharding it came from (None: propagation)."""

    axis: str
    origin: Origin | None
    hops: int
    path: tuple[int, ...]  # ops crossed, from the origin towards the value


def _arg_label(values: ModuleValues, func: int, k: int) -> tuple[str, SourceLoc | None]:
    graph = values.graph
    arg = graph.values[graph.op_blocks[func][0][0][k]]
    text = str(arg.location)
    name = text[5:-2] if text.startswith('loc("') and '":' not in text else ""
    return (f"arg {k} ({name})" if name else f"arg {k}"), source_loc_of(arg.location)


def user_origins(values: ModuleValues, user_args: Sequence[bool] | None = None,
                 user_results: Sequence[bool] | None = None) -> list[Origin]:
    """Every user-given sharding of the module, as seeds of the search.

    ``user_args`` / ``user_results`` say which arguments and results of the
    public functions the user sharded (default: every one with a sharding).
    """
    graph, store = values.graph, values.store
    found: list[Origin] = []
    for func, results in store.func_results.items():
        if not graph.op_blocks[func]:
            continue
        args, nested = graph.op_blocks[func][0]
        for k, arg in enumerate(args):
            given = store.get(arg) is not None if user_args is None else (
                k < len(user_args) and user_args[k])
            if given:
                label, loc = _arg_label(values, func, k)
                found.append(Origin("argument", label, loc, arg))
        ret = nested[-1] if nested else -1
        if ret < 0 or graph.op_name[ret] != "func.return":
            continue
        for k, value in enumerate(graph.op_operands[ret]):
            given = k < len(results) and store.value[results[k]] is not None
            if user_results is not None:
                given = k < len(user_results) and user_results[k]
            if given:
                loc = source_loc_of(graph.ops[ret].location)
                found.append(Origin("result", f"result {k}", loc, value))
    for op, name in enumerate(graph.op_name):
        loc = source_loc_of(graph.ops[op].location)
        if name in USER_OPS:
            found += [Origin("constraint", name.split(".")[1], loc, v)
                      for v in graph.op_results[op]]
        elif name == MANUAL_OP:
            found += [Origin("shard_map", "shard_map in_specs", loc, v)
                      for v in graph.op_operands[op]]
            found += [Origin("shard_map", "shard_map out_specs", loc, v)
                      for v in graph.op_results[op]]
    return found


def neighbours(values: ModuleValues, value: int) -> Iterable[tuple[int, int]]:
    """Values one propagation edge away from ``value``, with the op the edge crosses."""
    graph = values.graph
    op = graph.value_def[value]
    if op >= 0 and graph.op_name[op] not in _STRUCTURE:
        for other in (*graph.op_operands[op], *graph.op_results[op]):
            yield other, op
    elif op < 0:
        owner, k = graph.value_owner[value], graph.value_arg_index[value]
        if graph.op_name[owner] not in BODY_OPS | _STRUCTURE:
            for side in (graph.op_operands[owner], graph.op_results[owner]):
                if k < len(side):
                    yield side[k], owner
    for user, k in graph.uses[value]:
        name = graph.op_name[user]
        if graph.op_terminator[user]:
            parent = graph.op_parent[user]
            if parent >= 0 and graph.op_name[parent] not in BODY_OPS | _STRUCTURE:
                results = graph.op_results[parent]
                if k < len(results):
                    yield results[k], parent
                for args, _ in graph.op_blocks[parent]:
                    if k < len(args):
                        yield args[k], parent
        elif name not in _STRUCTURE:
            for other in (*graph.op_operands[user], *graph.op_results[user]):
                yield other, user
            if name not in BODY_OPS:
                for args, _ in graph.op_blocks[user]:
                    if k < len(args):
                        yield args[k], user


def axes_of(values: ModuleValues, value: int) -> tuple[str, ...]:
    """Mesh axis names the value's sharding uses (dimension order, no repeats)."""
    sharding = values.sharding(value)
    if sharding is None:
        return ()
    names: list[str] = []
    for dim in sharding.dims:
        for axis in dim.axes:
            if axis.name not in names:
                names.append(axis.name)
    return tuple(names)


def derive_origins(values: ModuleValues, seeds: Sequence[Origin]) -> dict[int, list[AxisOrigin]]:
    """For each value with a sharded axis: that axis's nearest user origin (see module doc)."""
    graph = values.graph
    axes = [axes_of(values, v) if graph.value_shape[v] is not None else ()
            for v in range(len(graph.values))]
    result: dict[int, list[AxisOrigin]] = {}
    for axis in sorted({a for names in axes for a in names}):
        reached: dict[int, tuple[Origin, int, int, int]] = {}  # value -> origin, hops, prev, op
        queue: deque[int] = deque()
        for seed in seeds:
            if axis in axes[seed.value] and seed.value not in reached:
                reached[seed.value] = (seed, 0, -1, -1)
                queue.append(seed.value)
        while queue:
            value = queue.popleft()
            origin, hops, _, _ = reached[value]
            for other, op in neighbours(values, value):
                if other not in reached and axis in axes[other]:
                    reached[other] = (origin, hops + 1, value, op)
                    queue.append(other)
        for value, names in enumerate(axes):
            if axis not in names:
                continue
            if value not in reached:
                result.setdefault(value, []).append(AxisOrigin(axis, None, -1, ()))
                continue
            origin, hops, _, _ = reached[value]
            path, cursor = [], value
            while reached[cursor][2] >= 0:
                path.append(reached[cursor][3])
                cursor = reached[cursor][2]
            result.setdefault(value, []).append(
                AxisOrigin(axis, origin, hops, tuple(reversed(path))))
    for value, found in result.items():
        found.sort(key=lambda o: axes[value].index(o.axis))
    return result


def recorded_origins(values: ModuleValues, seeds: Sequence[Origin], recorded,
                     fallback: dict[int, list[AxisOrigin]]) -> dict[int, list[AxisOrigin]]:
    """Per value, its axes' origins as the propagation engine recorded them.

    ``recorded`` is the ``ShardingOrigins`` of the run that propagated
    ``values``' module (``propagate(..., record_origins=True)``, with
    ``debug_sharding_origins`` so constraints and manual computations carry
    their ``constraint_k`` / ``mc_k`` names). Each recorded origin maps to the
    seed it names: ``("input", n)`` to argument ``n`` of the main function,
    ``("output", n)`` to result ``n``, ``("constraint", name)`` to that
    constraint's result, ``("manual_input"|"manual_output", mc, n)`` to the
    shard_map's ``n``-th in/out spec, ``"self"`` to the value's own seed. An
    axis without a record (values Shardy does not annotate, such as region
    arguments) keeps its entry from ``fallback`` (the derivation). Recorded
    origins carry no path (``hops`` 0, ``path`` empty).
    """
    graph = values.graph
    by_value = {seed.value: seed for seed in seeds}
    named: dict[tuple, Origin] = {}
    main = recorded.main
    for func in values.store.func_results:
        attrs = graph.ops[func].attributes
        name = ir.StringAttr(attrs["sym_name"]).value if "sym_name" in attrs else ""
        if name != main or not graph.op_blocks[func]:
            continue
        args, nested = graph.op_blocks[func][0]
        for k, arg in enumerate(args):
            if arg in by_value:
                named[("input", k)] = by_value[arg]
        if nested and graph.op_name[nested[-1]] == "func.return":
            for k, value in enumerate(graph.op_operands[nested[-1]]):
                seed = next((s for s in seeds if s.value == value and s.kind == "result"), None)
                if seed is not None:
                    named[("output", k)] = seed
    for op, op_name in enumerate(graph.op_name):
        attrs = graph.ops[op].attributes
        if ORIGIN_NAME_ATTR not in attrs:
            continue
        label = ir.StringAttr(attrs[ORIGIN_NAME_ATTR]).value
        if op_name == MANUAL_OP:
            for k, value in enumerate(graph.op_operands[op]):
                if value in by_value:
                    named[("manual_input", label, k)] = by_value[value]
            for k, value in enumerate(graph.op_results[op]):
                if value in by_value:
                    named[("manual_output", label, k)] = by_value[value]
        elif graph.op_results[op] and graph.op_results[op][0] in by_value:
            named[("constraint", label)] = by_value[graph.op_results[op][0]]
    result: dict[int, list[AxisOrigin]] = {}
    for value in range(len(graph.values)):
        axes = axes_of(values, value) if graph.value_shape[value] is not None else ()
        if not axes:
            continue
        record = _record_of(values, recorded, main, value)
        derived = {o.axis: o for o in fallback.get(value, [])}
        found = []
        for axis in axes:
            origin = None
            if record is not None:
                origin = next((o for key, o in record.items() if key.split(":")[0] == axis),
                              None)
            seed = None
            if origin == "self":
                seed = by_value.get(value)
            elif origin is not None:
                seed = named.get(tuple(origin))
            if seed is None:  # no record, or one naming no user sharding of this module
                found.append(derived.get(axis, AxisOrigin(axis, None, -1, ())))
            else:
                found.append(AxisOrigin(axis, seed, 0, ()))
        result[value] = found
    return result


def _record_of(values: ModuleValues, recorded, main: str, value: int) -> dict | None:
    graph = values.graph
    op = graph.value_def[value]
    if op >= 0:
        return recorded.of_op(graph.ops[op], graph.value_arg_index[value])
    owner = graph.value_owner[value]
    if graph.op_name[owner] != "func.func":
        return None
    attrs = graph.ops[owner].attributes
    name = ir.StringAttr(attrs["sym_name"]).value if "sym_name" in attrs else ""
    funcs = recorded.funcs.get(name)
    return funcs.args.get(graph.value_arg_index[value]) if funcs is not None else None
