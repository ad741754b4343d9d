"""What ``jax.export`` reads from a shardc lowering.

``jax.export.export(jit(f), platforms=...)(*args)`` traces ``f`` with shardc's
``jit(f).trace(...)`` and lowers it with ``Traced.lower(lowering_platforms=...,
_private_parameters=...)``, the lowering parameters jax exports with (constants
not hoisted into arguments, export's forward-compatibility checks); shardc
passes them to jax's lowering of the traced program, under which shardc then
writes its shardings, so the module it exports is shardc's, with the Shardy
attributes XLA compiles.

jax then reads the lowering through ``Lowered._lowering``, and accepts only
jax's own class for jit there (``pxla.MeshComputation``): it takes the module,
the argument and result shardings (which become the ``Exported``'s
``in_shardings_hlo`` / ``out_shardings_hlo``), the device count and the
devices from it. ``export_lowering`` builds that object from jax's lowering of
the same program, with shardc's module, shardings, partition count and
devices in place of jax's; the rest (avals, effects, the symbolic-shape state,
platforms) is jax's, as traced. The module exported is the one XLA compiles
(``xla_form.module_for_xla``): whoever calls the ``Exported`` hands it to XLA,
whose import has no mesh for ``sdy.reshard`` and re-derives every op sharding
the cost-aware route decided unless a constraint pins it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from jax.sharding import AbstractMesh, Mesh
from jaxlib.mlir import ir

from shardc.dialects import jax_private
from shardc.dialects.xla_form import module_for_xla
from shardc.runtime.compiled import ValueInfo, device_assignment

NUM_PARTITIONS_ATTR = "mhlo.num_partitions"
CALL_EXPORTED = "call_exported"


def lowered_with_exported_calls(traced: Any, args: Sequence[ValueInfo],
                                results: Sequence[ValueInfo], *, cut_from: Any = None) -> Any:
    """``traced`` (jax's) to lower with the program's mesh as its context mesh when it
    calls an ``Exported``; ``cut_from``: the closed jaxpr ``traced``'s was cut from
    (its dead code removed), whose equations were read already: a primitive it does
    not bind, ``traced`` does not either, and its equations need no reading.

    jax's lowering of such a call checks the device count the ``Exported`` was
    made for against the lowering's. jax lowers what shardc traced without the
    shardings given to ``jit`` (shardc writes them), so it would count one
    device; with the program's mesh as the context it counts the program's, as
    for ``jax.jit`` with those shardings.
    """
    if cut_from is not None and CALL_EXPORTED not in jax_private.primitive_names(cut_from):
        return traced
    if CALL_EXPORTED not in jax_private.primitive_names(traced.jaxpr):
        return traced
    mesh = next((leaf.sharding.mesh for leaf in (*args, *results)
                 if leaf.sharding is not None and leaf.sharding.mesh.axis_names), None)
    return traced if mesh is None else jax_private.with_context_mesh(traced, mesh)


def export_lowering(
    jax_lowering: Any,
    module: ir.Module,
    args: Sequence[ValueInfo],
    results: Sequence[ValueInfo],
    meshes: Sequence[Mesh | AbstractMesh],
) -> Any:
    """jax's lowering of a shardc-lowered program (``Lowered._lowering``) holding
    shardc's ``module`` and the shardings shardc lowered its arguments and results
    with (``None`` where none was given or followed)."""
    return jax_private.lowering_with_module(
        jax_lowering,
        module_for_xla(module),
        # An argument placed by a sharding of another class than NamedSharding (a
        # result asked for by a SingleDeviceSharding) is lowered with it read as one;
        # jax's export reads the class it was given.
        in_shardings=[_as_given(leaf) for leaf in args],
        out_shardings=[_as_given(leaf) for leaf in results],
        num_devices=partition_count(module),
        devices=_concrete_devices(meshes),
    )


def _as_given(leaf: ValueInfo) -> Any:
    placed_as = getattr(leaf, "placed_as", None)
    return leaf.sharding if placed_as is None else placed_as


def partition_count(module: ir.Module) -> int:
    """How many devices the module is partitioned over (1 without shardings)."""
    attributes = module.operation.attributes
    if NUM_PARTITIONS_ATTR not in attributes:
        return 1
    return ir.IntegerAttr(attributes[NUM_PARTITIONS_ATTR]).value


def _concrete_devices(meshes: Sequence[Mesh | AbstractMesh]) -> tuple | None:
    """The program's devices in partition order when a concrete mesh names them; None
    for a program on abstract meshes, whose devices are chosen when it is called."""
    if not any(isinstance(mesh, Mesh) and mesh.axis_names for mesh in meshes):
        return None
    return device_assignment(meshes, None)
