"""Sharding errors the sdy verifier lets through (it already rejects unknown meshes,
unknown axes, axes used twice, rank mismatches and most manual-axis misuse).

* ``mesh-device-count``: shardings of one program on meshes with different
  device counts (maximal and empty meshes aside); one program runs on one set
  of devices.
* ``manual-mesh-mismatch``: a sharding inside an ``sdy.manual_computation``
  body that names another mesh than the computation's.
* ``constraint-contradicts-pinned``: an ``sdy.sharding_constraint`` applied
  directly to a function argument, or returned directly as a function result,
  whose pinned (closed) sharding says otherwise.
* ``manual-axis-not-in-output`` (a warning): a manual computation result whose
  out-sharding does not use one of the manual axes, so every device along it
  is assumed to hold the same value.
"""

from __future__ import annotations

from collections import Counter
from math import prod

from shardc.compiler.checks.diagnostic import ShardingDiagnostic, at
from shardc.compiler.cost.reshard import reshard_collectives
from shardc.compiler.diagnostics import Severity
from shardc.compiler.propagation.manual import MANUAL_OP
from shardc.compiler.propagation.values import ModuleValues, element_bytes
from shardc.compiler.sharding.tensor import MeshInfo, TensorSharding, format_inner

CONSTRAINT = "sdy.sharding_constraint"


def device_count(mesh: MeshInfo) -> int | None:
    """Devices of a mesh; None for empty and maximal meshes (they fit any program)."""
    if mesh.empty or mesh.maximal:
        return None
    return prod(mesh.sizes.values())


def _mesh_device_counts(values: ModuleValues) -> list[ShardingDiagnostic]:
    uses = Counter(s.mesh for s in values.store.value if s is not None)
    counts = {name: device_count(values.meshes[name]) for name in uses if name in values.meshes}
    counts = {name: n for name, n in counts.items() if n is not None}
    if len(set(counts.values())) <= 1:
        return []
    main = max(counts, key=lambda name: uses[name])
    graph = values.graph
    found = []
    for op, name in enumerate(graph.op_name):
        if name != "sdy.mesh":
            continue
        symbol = str(graph.ops[op].attributes["sym_name"]).strip('"')
        if symbol in counts and counts[symbol] != counts[main]:
            found.append(at(graph.ops[op], "mesh-device-count", Severity.ERROR,
                            f"mesh @{symbol} has {counts[symbol]} devices but mesh @{main} has "
                            f"{counts[main]}; all shardings of one program must use meshes "
                            "of the same device count"))
    return found


def enclosing_manual(values: ModuleValues, op: int) -> int:
    """The innermost manual computation around ``op`` (-1 if none)."""
    graph = values.graph
    parent = graph.op_parent[op]
    while parent >= 0 and graph.op_name[parent] != MANUAL_OP:
        parent = graph.op_parent[parent]
    return parent


def _manual_mesh(values: ModuleValues, manual: int) -> str | None:
    _, ins, outs = values.store.manual[manual]
    for sharding in (*ins, *outs):
        return sharding.mesh
    return None


def _manual_checks(values: ModuleValues) -> list[ShardingDiagnostic]:
    graph, store = values.graph, values.store
    found = []
    for op, name in enumerate(graph.op_name):
        manual = enclosing_manual(values, op)
        if manual < 0 or manual not in store.manual:
            continue
        mesh = _manual_mesh(values, manual)
        for value in graph.op_results[op]:
            sharding = store.get(value)
            info = values.meshes.get(sharding.mesh) if sharding is not None else None
            if info is None or sharding.mesh == mesh or info.empty or info.maximal:
                continue
            found.append(at(graph.ops[op], "manual-mesh-mismatch", Severity.ERROR,
                            f"sharding on mesh @{sharding.mesh} inside a manual computation "
                            f"over mesh @{mesh}; ops in a manual computation must use its mesh"))
            break
    for op, (axes, _, outs) in store.manual.items():
        for k, out in enumerate(outs):
            used = {axis.name for dim in out.dims for axis in dim.axes}
            missing = [f'"{axis}"' for axis in axes if axis not in used]
            if missing and not _returns_reduced(values, op, k):
                found.append(at(graph.ops[op], "manual-axis-not-in-output", Severity.WARNING,
                                f"result {k} is not sharded over manual axis "
                                f"{', '.join(missing)}: every device along it is assumed to "
                                "hold the same value (reduce it first, e.g. with psum)"))
    return found


# Results of these are the same on every device of their replica groups.
_SAME_EVERYWHERE = frozenset({
    "stablehlo.all_gather", "stablehlo.all_reduce", "stablehlo.collective_broadcast",
})


def _returns_reduced(values: ModuleValues, manual: int, index: int) -> bool:
    """Whether the body returns result ``index`` straight from a psum-like collective."""
    graph = values.graph
    if not graph.op_blocks[manual]:
        return False
    terminator = graph.op_blocks[manual][0][1][-1]
    operands = graph.op_operands[terminator]
    if index >= len(operands):
        return False
    defining = graph.value_def[operands[index]]
    return defining >= 0 and graph.op_name[defining] in _SAME_EVERYWHERE


def contradicts(pinned: TensorSharding, constraint: TensorSharding) -> bool:
    """Whether a constraint asks for other axes than a closed sharding has."""
    if pinned.mesh != constraint.mesh or len(pinned.dims) != len(constraint.dims):
        return pinned.mesh != constraint.mesh
    for have, want in zip(pinned.dims, constraint.dims):
        if want.closed and want.axes != have.axes:
            return True
        if not want.closed and want.axes != have.axes[: len(want.axes)]:
            return True
    return False


def _is_pinned(sharding: TensorSharding | None) -> bool:
    return sharding is not None and all(dim.closed for dim in sharding.dims)


def _contradiction(values: ModuleValues, op: int, pinned: TensorSharding, what: str,
                   constraint: TensorSharding, value: int) -> ShardingDiagnostic:
    graph = values.graph
    shape = graph.value_shape[value] or ()
    src, dst = (pinned, constraint) if what.startswith("argument") else (constraint, pinned)
    cost = reshard_collectives(shape, element_bytes(graph.values[value].type), src, dst,
                               mesh=values.mesh_of(src, dst))
    moves = ", ".join(f"{c.kind} over {', '.join(map(repr, c.axes))}" for c in cost)
    moves = moves.replace("'", '"') or "a reshard"
    total = sum(c.bytes_per_device for c in cost)
    return at(graph.ops[op], "constraint-contradicts-pinned", Severity.ERROR,
              f"sharding constraint {format_inner(constraint)} contradicts the pinned sharding "
              f"{format_inner(pinned)} of {what} ({moves}, {total} bytes per device)")


def _constraint_checks(values: ModuleValues) -> list[ShardingDiagnostic]:
    graph, store = values.graph, values.store
    found = []
    for op, name in enumerate(graph.op_name):
        if name != CONSTRAINT:
            continue
        operand, result = graph.op_operands[op][0], graph.op_results[op][0]
        constraint = store.get(result)
        if constraint is None:
            continue
        owner = graph.value_owner[operand]
        if graph.value_def[operand] == -1 and graph.op_name[owner] == "func.func":
            arg = store.get(operand)
            if _is_pinned(arg) and contradicts(arg, constraint):
                what = f"argument {graph.value_arg_index[operand]}"
                found.append(_contradiction(values, op, arg, what, constraint, operand))
        for user, index in graph.uses[result]:
            func = graph.op_parent[user]
            if graph.op_name[user] != "func.return" or graph.op_name[func] != "func.func":
                continue
            pinned = store.value[store.func_results[func][index]]
            if _is_pinned(pinned) and contradicts(pinned, constraint):
                found.append(_contradiction(values, op, pinned, f"result {index}",
                                            constraint, result))
    return found


def check(values: ModuleValues) -> list[ShardingDiagnostic]:
    """Every structural finding of the module."""
    return _mesh_device_counts(values) + _manual_checks(values) + _constraint_checks(values)
