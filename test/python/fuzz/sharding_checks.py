"""Checks on a module after propagation: it verifies, and every sharding names real axes.

``verification_problem`` re-parses the printed module in a fresh context
(MLIR verifies on parse, including Shardy's attribute and op verifiers) so
that nothing only an in-memory module accepts slips through.
``sharding_reference_problems`` visits every ``#sdy.sharding`` wherever it
sits (function argument/result attributes, op ``sdy.sharding`` attributes,
attributes of sdy ops, nested in arrays and dictionaries) and checks that
its mesh symbol exists and that each axis and sub-axis it uses (dimension,
replicated and unreduced axes) exists in that mesh and fits its size.
"""

from __future__ import annotations

from jaxlib.mlir import ir

from shardc.dialects import make_context, sdy


def verification_problem(text: str) -> str | None:
    """None if ``text`` parses and verifies in a fresh shardc context, else the error."""
    context = make_context()
    try:
        module = ir.Module.parse(text, context)
        if not module.operation.verify():
            return "module does not verify"
    except ir.MLIRError as error:
        messages = "; ".join(str(d) for d in error.error_diagnostics)
        return f"module does not parse/verify: {messages}"
    return None


def mesh_symbols(module: ir.Module) -> dict[str, dict[str, int]]:
    """``{symbol: {axis: size}}`` of every top-level ``sdy.mesh``."""
    meshes = {}
    for op in module.body.operations:
        if op.operation.name == "sdy.mesh":
            name = ir.StringAttr(op.operation.attributes["sym_name"]).value
            meshes[name] = _axes(op.operation.attributes["mesh"])
    return meshes


def _axes(mesh: ir.Attribute) -> dict[str, int]:
    return {sdy.MeshAxisAttr(a).name: sdy.MeshAxisAttr(a).size for a in sdy.MeshAttr(mesh).axes}


def _shardings_in(attr: ir.Attribute):
    """Yield every TensorShardingAttr nested in ``attr``."""
    if sdy.TensorShardingAttr.isinstance(attr):
        yield sdy.TensorShardingAttr(attr)
    elif sdy.TensorShardingPerValueAttr.isinstance(attr):
        for sharding in sdy.TensorShardingPerValueAttr(attr).shardings:
            yield sdy.TensorShardingAttr(sharding)
    elif isinstance(attr, ir.ArrayAttr):
        for element in attr:
            yield from _shardings_in(element)
    elif isinstance(attr, ir.DictAttr):
        for i in range(len(attr)):
            yield from _shardings_in(attr[i].attr)


def all_shardings(module: ir.Module) -> list[sdy.TensorShardingAttr]:
    """Every sharding attribute anywhere in the module."""
    found = []

    def visit(op: ir.Operation) -> ir.WalkResult:
        attributes = op.attributes
        for i in range(len(attributes)):
            found.extend(_shardings_in(attributes[i].attr))
        return ir.WalkResult.ADVANCE

    module.operation.walk(visit)
    return found


def _axis_problem(axis_attr: ir.Attribute, axes: dict[str, int], sharding) -> str | None:
    axis = sdy.AxisRefAttr(axis_attr)
    if axis.name not in axes:
        return f"{sharding}: axis '{axis.name}' is not in the mesh {axes}"
    info = axis.sub_axis_info
    if info is not None:
        sub = sdy.SubAxisInfoAttr(info)
        if axes[axis.name] % (sub.pre_size * sub.size):
            return f"{sharding}: sub-axis {axis} does not fit '{axis.name}'={axes[axis.name]}"
    return None


def sharding_reference_problems(module: ir.Module) -> list[str]:
    """Shardings that name a missing mesh, a missing axis or an ill-fitting sub-axis."""
    meshes = mesh_symbols(module)
    problems = []
    for sharding in all_shardings(module):
        mesh = sharding.mesh_or_ref
        if isinstance(mesh, ir.FlatSymbolRefAttr):
            if mesh.value not in meshes:
                problems.append(f"{sharding}: unknown mesh @{mesh.value}")
                continue
            axes = meshes[mesh.value]
        else:
            axes = _axes(mesh)
        axis_attrs = [a for d in sharding.dimension_shardings
                      for a in sdy.DimensionShardingAttr(d).axes]
        axis_attrs += list(sharding.replicated_axes) + list(sharding.unreduced_axes)
        problems += filter(None, (_axis_problem(a, axes, sharding) for a in axis_attrs))
    return problems
