"""A module that shardc's own steps made invalid surfaces as ``InternalError``.

It names the step (and, from the command line, the pass) and the op the MLIR
verifier rejected, at the user's source line; it never reaches the user as a
raw ``MLIRError`` from re-parsing the lowering. The breakage is simulated by a
step that moves a constant of a ``while`` body into its condition, the class
of bug that once made every reverse ``scan`` fail to lower.
"""

import jax
import jax.numpy as jnp
import pytest
from jax.sharding import AxisType
from jax.sharding import PartitionSpec as P
from jaxlib.mlir import ir, passmanager

from shardc.compiler import jit
from shardc.compiler.diagnostics import DiagnosticSink, collecting, verifying_steps
from shardc.compiler.passes.base import ModulePass
from shardc.compiler.sharding.walker import nested_ops
from shardc.compiler.stages import export_steps
from shardc.dialects import make_context
from shardc.dialects.errors import InternalError, ShardcError

WHILE = """
sdy.mesh @mesh = <["x"=4]>
func.func @main(%arg0: tensor<8xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"x"}]>}) -> tensor<8xf32> {
  %c = stablehlo.constant dense<0> : tensor<i32>
  %0:2 = stablehlo.while(%i = %c, %x = %arg0) : tensor<i32>, tensor<8xf32>
  cond {
    %c3 = stablehlo.constant dense<3> : tensor<i32>
    %p = stablehlo.compare LT, %i, %c3, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
    stablehlo.return %p : tensor<i1>
  } do {
    %c3 = stablehlo.constant dense<3> : tensor<i32>
    %j = stablehlo.subtract %c3, %i : tensor<i32>
    %y = stablehlo.add %x, %x : tensor<8xf32>
    stablehlo.return %j, %y : tensor<i32>, tensor<8xf32>
  }
  return %0#1 : tensor<8xf32>
}
"""


def _share_body_constant_with_cond(module: ir.Operation) -> None:
    """Make a body op use the condition's constant: invalid, like a bad merge."""
    for op in nested_ops(module, ir.WalkOrder.PRE_ORDER):
        if op.name == "stablehlo.while":
            cond, body = (region.blocks[0] for region in op.regions)
            cond_constant = next(o for o in cond.operations if "constant" in o.operation.name)
            user = next(o for o in body.operations if o.operation.name == "stablehlo.subtract")
            user.operation.operands[0] = cond_constant.operation.results[0]
            return


def _broken_merger(module: ir.Operation,
                   copies: list[ir.Operation] | None = None) -> list[ir.Operation]:
    _share_body_constant_with_cond(module)
    return []  # the ops it erased


_broken_merger.__name__ = "constant_or_scalar_merger"


def _reverse_scan(x):
    return jax.lax.scan(lambda h, _: (h + 1.0, h), x, None, length=3, reverse=True)[1]


@pytest.fixture
def mesh():
    return jax.make_mesh((4, 2), ("data", "model"), axis_types=(AxisType.Auto,) * 2)


def test_reverse_scan_lowers_and_runs(mesh):
    out = jit(_reverse_scan, in_shardings=P("data"), mesh=mesh)(jnp.zeros(8))
    expected = jax.jit(_reverse_scan)(jnp.zeros(8))
    assert (out == expected).all()


@pytest.mark.parametrize("verified", [True, False])
def test_broken_step_is_an_internal_error_naming_step_and_op(monkeypatch, mesh, verified):
    monkeypatch.setattr(export_steps, "constant_or_scalar_merger", _broken_merger)
    # Unverified steps: the pipeline's one final verification fails, and the
    # replay with every step verified finds which step broke the module.
    # A function of its own: jits of `_reverse_scan` made with these arguments share
    # the lowering an earlier test made with the real step.
    def reverse_scan(x):
        return _reverse_scan(x)

    with verifying_steps(verified), pytest.raises(InternalError) as info:
        jit(reverse_scan, in_shardings=P("data"), mesh=mesh).lower(jnp.zeros(8))
    error = info.value
    assert isinstance(error, ShardcError) and isinstance(error, RuntimeError)
    assert error.step == "step 'constant_or_scalar_merger'"
    assert error.op == "stablehlo.subtract"
    assert "does not dominate this use" in error.reason
    assert "test_internal_error.py" in str(error)  # the user's source line
    assert "a bug in shardc" in str(error)


class _BreakingPass(ModulePass):
    """Break the module (test only)"""

    name = "test-break"

    def run(self, module: ir.Operation) -> None:
        _share_body_constant_with_cond(module)


def test_pass_adapter_reports_the_pass_and_the_op():
    with make_context(), collecting(DiagnosticSink()):
        module = ir.Module.parse(WHILE)
        pm = passmanager.PassManager("builtin.module")
        pm.add(_BreakingPass().run_op, name="_BreakingPass", argument="test-break", op_name="")
        with pytest.raises(ir.MLIRError) as info:
            pm.run(module.operation)
    messages = [d.message for d in info.value.error_diagnostics]
    assert any(m.startswith("shardc internal error: pass 'test-break' produced an invalid "
                            "module: 'stablehlo.subtract' op operand #0 does not dominate")
               for m in messages), messages
