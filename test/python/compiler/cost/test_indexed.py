"""The gather/scatter model's memo (``compiler/cost/indexed.py``): the memoised answer is
the computed one, for every sharding it is asked about."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P
from jaxlib.mlir import ir

from shardc.compiler import jit
from shardc.compiler.cost.indexed import _indexed_communication, indexed_communication
from shardc.compiler.propagation.values import ModuleValues
from shardc.compiler.sharding.rules import indexed_roles_for
from shardc.compiler.sharding.tensor import DimSharding
from shardc.dialects import make_context


def _gather():
    """``(rule, roles, operands, results, mesh)`` of a row gather from a table sharded by row."""
    mesh = jax.make_mesh((8,), ("x",), axis_types=(AxisType.Auto,))
    table = jax.device_put(np.ones((64, 16), np.float32), NamedSharding(mesh, P("x")))
    indices = jax.device_put(np.arange(8, dtype=np.int32), NamedSharding(mesh, P()))
    text = jit(lambda t, i: jnp.take(t, i, axis=0)).lower(table, indices).as_text(
        propagated=True)
    module = ir.Module.parse(text, make_context())
    reader = ModuleValues(module.operation, missing_as_replicated=True)
    op = reader.graph.op_name.index("stablehlo.gather")
    rule, operands, results = reader.rule_tensors(op)
    mesh = reader.mesh_of(*(t.sharding for t in results + operands))
    _gather.keep_alive = module
    return rule, indexed_roles_for(reader.graph.ops[op]), operands, results, mesh


def test_memoised_answers_are_the_computed_ones():
    rule, roles, operands, results, mesh = _gather()
    first = indexed_communication(rule, roles, operands, results, mesh)
    assert first and first == _indexed_communication(rule, roles, operands, results, mesh)
    assert indexed_communication(rule, roles, operands, results, mesh) == first
    # Another sharding of the table is another question (the key holds the shardings).
    data = operands[0]
    dims = (DimSharding((), True),) * len(data.shape)
    replicated = dataclasses.replace(data, sharding=data.sharding._replace(dims=dims))
    moved = [replicated, *operands[1:]]
    again = indexed_communication(rule, roles, moved, results, mesh)
    assert again == _indexed_communication(rule, roles, moved, results, mesh)
    assert again != first
