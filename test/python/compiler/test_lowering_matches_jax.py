"""The module shardc propagates carries the shardings jax.jit's own lowering writes.

shardc traces as jax.jit does and then writes the Shardy attributes itself. For
every zoo and ``bench/models`` program, the unpropagated module (``lower(...,
propagate=False)``) must carry, on ``@main``'s arguments and results and on the
sharding constraints of the body (in order), the shardings of jax.jit's lowered
module for the same function, arguments and shardings. Mesh symbol names are
compared by the mesh they name.
"""

from __future__ import annotations

import contextlib
import re

import jax
import pytest
from jaxlib.mlir import ir

from bench.models import REGISTRY as MODELS
from bench.zoo import REGISTRY as ZOO
from shardc.compiler import jit
from shardc.dialects import make_context

PROGRAMS = {**{f"zoo/{k}": v for k, v in ZOO.items()},
            **{f"models/{k}": v for k, v in MODELS.items()}}


def shardings_of(text: str) -> dict:
    """``@main``'s argument / result shardings and the body's constraint shardings, with
    each mesh symbol replaced by the mesh it names."""
    module = ir.Module.parse(text, make_context())
    meshes = {}
    for op in module.body.operations:
        if op.operation.name == "sdy.mesh":
            name = ir.StringAttr(op.operation.attributes["sym_name"]).value
            meshes[name] = str(op.operation.attributes["mesh"])

    def named(attr) -> str:
        return re.sub(r"@([\w.$-]+)", lambda m: meshes.get(m.group(1), m.group(0)), str(attr))

    main = next(op for op in module.body.operations
                if op.operation.name == "func.func"
                and ir.StringAttr(op.operation.attributes["sym_name"]).value == "main")

    def per_value(list_name: str) -> list:
        if list_name not in main.operation.attributes:
            return []
        return [named(ir.DictAttr(d)["sdy.sharding"]) if "sdy.sharding" in ir.DictAttr(d) else None
                for d in ir.ArrayAttr(main.operation.attributes[list_name])]

    constraints: list[str] = []

    def visit(op: ir.Operation) -> ir.WalkResult:
        sharding = named(op.attributes["sharding"]) if op.name == "sdy.sharding_constraint" \
            else None
        # jax's lowering pins the key-data dims of a PRNG key result whose out_sharding is
        # unspecified with a constraint on an axis-less mesh: it constrains nothing the
        # result's own sharding does not (test_lowered_text.py compares whole texts).
        if sharding is not None and not sharding.startswith("#sdy.sharding<#sdy.mesh<[]>"):
            constraints.append(sharding)
        return ir.WalkResult.ADVANCE

    module.operation.walk(visit)
    return {"args": per_value("arg_attrs"), "results": per_value("res_attrs"),
            "constraints": constraints}


@pytest.mark.parametrize("name", list(PROGRAMS))
def test_unpropagated_module_has_jax_jits_shardings(name):
    program = PROGRAMS[name]("small")
    context = jax.set_mesh(program.mesh) if program.mesh_context else contextlib.nullcontext()
    with context:
        theirs = jax.jit(program.fun, in_shardings=program.in_shardings,
                         out_shardings=program.out_shardings, keep_unused=True,
                         donate_argnums=program.donate_argnums).lower(*program.args).as_text()
        ours = jit(program.fun, program.in_shardings, program.out_shardings,
                   donate_argnums=program.donate_argnums).lower(*program.args, propagate=False)
    assert shardings_of(ours.as_text()) == shardings_of(theirs)


def _row_shares(x):
    return jax.numpy.cumsum(x, -1) / jax.numpy.sum(x, -1, keepdims=True)


def _rows_of(sharding):
    return jax.sharding.NamedSharding(sharding.mesh, jax.P(sharding.spec[0], None))


@pytest.mark.parametrize("given", ["in_shardings", "out_shardings"])
def test_custom_partitioning_of_unplaced_arguments_lowers_on_the_programs_devices(given):
    # jax lowers a custom_partitioning op as a call to its partitioner only when the
    # lowering knows more than one device; from arguments not yet placed, only the
    # jit's shardings tell it. A lowering that lost them inlined the op's body, so
    # the user's partition rule never ran.
    from jax.experimental.custom_partitioning import custom_partitioning

    shares = custom_partitioning(_row_shares)
    shares.def_partition(
        infer_sharding_from_operands=lambda mesh, args, result: _rows_of(args[0].sharding),
        partition=lambda mesh, args, result: (
            mesh, _row_shares, _rows_of(args[0].sharding), (_rows_of(args[0].sharding),)),
        sharding_rule="b i -> b i")
    mesh = jax.make_mesh((4, 2), ("data", "model"),
                         axis_types=(jax.sharding.AxisType.Auto,) * 2)
    sharding = jax.sharding.NamedSharding(mesh, jax.P("data", "model"))
    x = jax.numpy.arange(32 * 64, dtype=jax.numpy.float32).reshape(32, 64) / 100
    outputs = []
    for make in (jax.jit, jit):
        lowered = make(shares, **{given: sharding}).lower(x)
        assert "CustomSPMDPartitioning" in lowered.as_text()
        outputs.append(lowered.compile()(x))
    theirs, ours = outputs
    assert ours.sharding == theirs.sharding == sharding
    assert (jax.device_get(ours) == jax.device_get(theirs)).all()
