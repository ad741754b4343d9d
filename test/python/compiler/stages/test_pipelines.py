"""The import and export pipelines skip the steps whose ops a module does not hold."""

from jaxlib.mlir import ir

from shardc.compiler import stages
from shardc.compiler.propagation.ir_access import EDGE_OP
from shardc.compiler.sharding.walker import nested_ops
from shardc.compiler.stages import export_steps
from shardc.dialects import make_context

PLAIN = """
sdy.mesh @mesh = <["x"=2]>
func.func @main(%arg0: tensor<8xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"x"}]>}) -> tensor<8xf32> {
  %0 = stablehlo.negate %arg0 : tensor<8xf32>
  return %0 : tensor<8xf32>
}
"""

WITH_RULE = """
sdy.mesh @mesh = <["x"=2]>
func.func @main(%arg0: tensor<8xf32>) -> tensor<8xf32> {
  %0 = stablehlo.negate %arg0 {sdy.sharding_rule = #sdy.op_sharding_rule<([i])->([i]) {i=8}>} : tensor<8xf32>
  return %0 : tensor<8xf32>
}
"""

# Inline meshes only in a callee's body, and only on an argument: each must be lifted.
CALLEE_INLINE_MESH = """
sdy.mesh @mesh = <["x"=2]>
func.func @main(%arg0: tensor<8xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"x"}]>}) -> tensor<8xf32> {
  %0 = func.call @f(%arg0) : (tensor<8xf32>) -> tensor<8xf32>
  return %0 : tensor<8xf32>
}
func.func private @f(%arg0: tensor<8xf32>) -> tensor<8xf32> {
  %0 = sdy.sharding_constraint %arg0 <mesh<["y"=2]>, [{"y"}]> : tensor<8xf32>
  %1 = stablehlo.negate %0 : tensor<8xf32>
  return %1 : tensor<8xf32>
}
"""

ARGUMENT_INLINE_MESH = """
func.func @main(%arg0: tensor<8xf32> {sdy.sharding = #sdy.sharding<mesh<["x"=2]>, [{"x"}]>}) -> tensor<8xf32> {
  %0 = stablehlo.negate %arg0 : tensor<8xf32>
  return %0 : tensor<8xf32>
}
"""


# A function nothing calls, which calls others and names a mesh inline: the import
# drops it (and the functions only it calls) without a symbol-dce of its own first.
DEAD_CALLER = """
sdy.mesh @mesh = <["x"=2]>
func.func @main(%arg0: tensor<8xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"x"}]>}) -> tensor<8xf32> {
  %0 = func.call @f(%arg0) : (tensor<8xf32>) -> tensor<8xf32>
  return %0 : tensor<8xf32>
}
func.func private @f(%arg0: tensor<8xf32>) -> tensor<8xf32> {
  %0 = stablehlo.negate %arg0 : tensor<8xf32>
  return %0 : tensor<8xf32>
}
func.func private @dead(%arg0: tensor<8xf32>) -> tensor<8xf32> {
  %0 = func.call @f(%arg0) : (tensor<8xf32>) -> tensor<8xf32>
  %1 = sdy.sharding_constraint %0 <mesh<["y"=2]>, [{"y"}]> : tensor<8xf32>
  %2 = func.call @g(%1) : (tensor<8xf32>) -> tensor<8xf32>
  return %2 : tensor<8xf32>
}
func.func private @g(%arg0: tensor<8xf32>) -> tensor<8xf32> {
  return %arg0 : tensor<8xf32>
}
"""


def _steps_run(monkeypatch, pipeline, text: str, **options) -> list[str]:
    ran: list[str] = []
    monkeypatch.setattr(stages, "verify_step", lambda module, name: ran.append(name))
    module = ir.Module.parse(text, make_context())
    with module.context:
        pipeline(module.operation, **options)
    return ran


def test_import_skips_steps_with_nothing_to_rewrite(monkeypatch):
    ran = _steps_run(monkeypatch, stages.import_pipeline, PLAIN)
    # The steps after the splitter look for their ops among those it met.
    assert ran == ["inline_all_calls", "symbol_dce", "lift_inlined_meshes",
                   "remove_size_one_axes", "constant_or_scalar_splitter"]


def test_export_skips_steps_with_nothing_to_rewrite(monkeypatch):
    ran = _steps_run(monkeypatch, stages.export_pipeline, PLAIN)
    # Nothing is unused: erase_dead_ops has nothing to erase.
    assert ran == ["constant_or_scalar_merger", "fix_io_shardings", "close_shardings"]
    ran = _steps_run(monkeypatch, stages.export_pipeline, DEAD_OP)
    assert ran[-1] == "erase_dead_ops"


def test_export_drops_rules_only_where_some_op_has_one(monkeypatch):
    ran = _steps_run(monkeypatch, stages.export_pipeline, WITH_RULE)
    assert ran[-1] == "drop_sharding_rules"
    # A step given to insert reshards may write rules: they are dropped after it.
    ran = _steps_run(monkeypatch, stages.export_pipeline, PLAIN,
                     explicit_reshards=export_steps.close_shardings)
    assert ran[-1] == "drop_sharding_rules"


def test_skipped_steps_leave_the_module_as_running_them_does():
    for text in (PLAIN, WITH_RULE, CALLEE_INLINE_MESH, ARGUMENT_INLINE_MESH, DEAD_CALLER):
        skipped, every = (ir.Module.parse(text, make_context()) for _ in range(2))
        with skipped.context:
            stages.import_pipeline(skipped.operation)
            stages.export_pipeline(skipped.operation)
        with every.context:
            stages.run_steps(every.operation, (
                stages.symbol_dce, stages.inline_all_calls, stages.symbol_dce,
                stages.lift_inlined_meshes, stages.import_steps.remove_size_one_axes,
                stages.import_steps.constant_or_scalar_splitter,
                stages.import_steps.manual_axes_cleanup, stages.add_data_flow_edges,
                stages.apply_sharding_constraints, export_steps.constant_or_scalar_merger,
                stages.sink_data_flow_edges, export_steps.remove_sharding_groups,
                export_steps.sharding_constraint_to_reshard,
                export_steps.update_non_divisible_io_shardings,
                stages.remove_sub_axes_in_main_io_shardings, export_steps.close_shardings,
                export_steps.erase_dead_ops, export_steps.drop_sharding_rules))
        assert str(skipped) == str(every)
        assert "mesh<" not in str(skipped)


def test_symbol_dce_runs_the_pass_only_where_a_symbol_may_go(monkeypatch):
    passes: list[str] = []
    monkeypatch.setattr(stages, "_generic", lambda module, pipeline: passes.append(pipeline))
    public_main = PLAIN.replace("func.func @main", "func.func public @main")
    for text in (PLAIN, public_main, ARGUMENT_INLINE_MESH, CALLEE_INLINE_MESH):
        module = ir.Module.parse(text, make_context())
        stages.symbol_dce(module.operation)
    # Only CALLEE_INLINE_MESH has a private function.
    assert passes == ["symbol-dce"]


DEAD_OP = PLAIN.replace("  return %0", "  %1 = stablehlo.abs %arg0 : tensor<8xf32>\n  return %0")

# What the export stage finds in one walk instead of each step's own: shardings
# left open on ops, constants, constraints, loops (data-flow edges) and function
# boundaries (sub-axes, dims the axes do not divide), copies to merge, dead ops.
EXPORTED = [PLAIN, WITH_RULE, DEAD_OP, """
sdy.mesh @mesh = <["x"=2, "y"=4]>
func.func @main(%arg0: tensor<6x8xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"x", ?}, {"y":(1)2, ?}]>},
                %arg1: tensor<i32>) -> (tensor<6x8xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"y", ?}, {?}]>}) {
  %c = sdy.constant {sdy.sharding = #sdy.sharding_per_value<[<@mesh, [{?}, {"y", ?}], replicated={"x"}>]>} dense<1.0> : tensor<6x8xf32>
  %c0 = sdy.constant {sdy.sharding = #sdy.sharding_per_value<[<@mesh, [{?}, {"y", ?}], replicated={"x"}>]>} dense<1.0> : tensor<6x8xf32>
  %0 = stablehlo.add %arg0, %c {sdy.sharding = #sdy.sharding_per_value<[<@mesh, [{"x", ?}, {?}]>]>} : tensor<6x8xf32>
  %1 = stablehlo.add %0, %c0 : tensor<6x8xf32>
  %2 = sdy.sharding_constraint %1 <@mesh, [{?}, {"y", ?}]> : tensor<6x8xf32>
  %3:2 = stablehlo.while(%iterArg = %2, %iterArg_1 = %arg1) : tensor<6x8xf32>, tensor<i32>
    cond {
    %c1 = stablehlo.constant dense<3> : tensor<i32>
    %5 = stablehlo.compare LT, %iterArg_1, %c1 : (tensor<i32>, tensor<i32>) -> tensor<i1>
    stablehlo.return %5 : tensor<i1>
  } do {
    %c1 = stablehlo.constant dense<1> : tensor<i32>
    %5 = stablehlo.add %iterArg_1, %c1 : tensor<i32>
    %6 = stablehlo.negate %iterArg {sdy.sharding = #sdy.sharding_per_value<[<@mesh, [{"x", ?}, {?}]>]>} : tensor<6x8xf32>
    stablehlo.return %6, %5 : tensor<6x8xf32>, tensor<i32>
  }
  %4 = stablehlo.abs %3#0 : tensor<6x8xf32>
  return %3#0 : tensor<6x8xf32>
}
func.func @other(%arg0: tensor<6xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"y", ?}]>}) -> tensor<6xf32> {
  return %arg0 : tensor<6xf32>
}
"""]


def _every_export_step(module: ir.Operation) -> None:
    stages.run_steps(module, (
        export_steps.constant_or_scalar_merger, stages.sink_data_flow_edges,
        export_steps.remove_sharding_groups, export_steps.update_non_divisible_io_shardings,
        stages.remove_sub_axes_in_main_io_shardings, export_steps.close_shardings,
        export_steps.erase_dead_ops, export_steps.drop_sharding_rules))


def _add_open_edges(module: ir.Operation) -> None:
    """Data-flow edges, those of matrices with an open sharding (sinking gives it to the loop)."""
    stages.add_data_flow_edges(module)
    open_rows = ir.Attribute.parse('#sdy.sharding<@mesh, [{"x", ?}, {?}]>')
    for op in nested_ops(module, names={EDGE_OP}):
        if str(op.result.type) == "tensor<6x8xf32>":
            op.attributes["sharding"] = open_rows


def test_export_leaves_the_module_as_running_every_step_does():
    for text in EXPORTED:
        for with_edges in (False, True):
            found, every = (ir.Module.parse(text, make_context()) for _ in range(2))
            with found.context:
                if with_edges:
                    _add_open_edges(found.operation)
                    _add_open_edges(every.operation)
                stages.export_pipeline(found.operation, keep_constraints=True)
                _every_export_step(every.operation)
            assert str(found) == str(every)
            assert "?" not in str(found)


UNCALLED = """
func.func @main(%arg0: tensor<8xf32>) -> tensor<8xf32> {
  return %arg0 : tensor<8xf32>
}
func.func private @f(%arg0: tensor<8xf32>) -> tensor<8xf32> {
  return %arg0 : tensor<8xf32>
}
"""


def test_symbol_dce_drops_an_uncalled_private_function():
    module = ir.Module.parse(UNCALLED, make_context())
    stages.symbol_dce(module.operation)
    assert "@f" not in str(module) and "@main" in str(module)
