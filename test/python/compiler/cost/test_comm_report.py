"""The communication report: the reshard model, the per-op model, the CLI, and the
comparison with XLA's real collectives on the model suite and hand-written programs."""

import json
import pathlib
import subprocess

import pytest
from jaxlib.mlir import ir

from bench import comm_report as comm_bench
from shardc.compiler.cost.report import collective_bytes_at, comm_report_of
from shardc.compiler.cost.reshard import reshard_collectives
from shardc.compiler.propagation.values import ModuleValues
from shardc.compiler.sharding.axes import full_axis
from shardc.compiler.sharding.tensor import DimSharding, TensorSharding
from shardc.dialects import make_context

ROOT = pathlib.Path(__file__).resolve().parents[4]

X, Y = full_axis("x", 4), full_axis("y", 2)


def sharding(*dims):
    return TensorSharding("m", tuple(DimSharding(tuple(d), True) for d in dims))


def kinds(found):
    return [(c.kind, c.axes, c.bytes_per_device) for c in found]


def test_equal_shardings_need_nothing():
    assert reshard_collectives((16, 16), 4, sharding([X], []), sharding([X], [])) == []


def test_adding_axes_is_a_free_slice():
    assert reshard_collectives((16, 16), 4, sharding([X], []), sharding([X, Y], [Y])) == []
    assert reshard_collectives((16, 16), 4, None, sharding([X], [])) == []


def test_dropping_axes_all_gathers_minor_dimension_first():
    found = reshard_collectives((64, 64), 4, sharding([X], [Y]), sharding([], []))
    assert kinds(found) == [("all-gather", ("y",), 4096), ("all-gather", ("x",), 16384)]


def test_gather_counts_padded_shards():
    # 18 rows over 4 devices: shards of 5 rows, 20 gathered.
    found = reshard_collectives((18, 8), 4, sharding([X], []), sharding([], []))
    assert kinds(found) == [("all-gather", ("x",), 20 * 8 * 4)]


def test_axis_moving_between_dimensions_is_an_all_to_all():
    found = reshard_collectives((16, 16), 4, sharding([X], []), sharding([], [X]))
    assert kinds(found) == [("all-to-all", ("x",), 4 * 16 * 4)]


def test_same_tiling_on_other_axes_is_a_collective_permute():
    a, b = full_axis("a", 2), full_axis("b", 2)
    found = reshard_collectives((16, 16), 4, sharding([a], [b]), sharding([b], [a]))
    assert kinds(found) == [("collective-permute", ("a", "b"), 8 * 8 * 4)]


def test_maximal_value_is_broadcast_by_an_all_reduce():
    # A host callback's result lives on one device (``<@maximal_mesh_0, []>``): XLA's
    # PartitionedHlo::Broadcast all-reduces the whole tensor, then slices any tiling.
    maximal = TensorSharding("maximal_mesh_0", ())
    found = reshard_collectives((16, 4), 4, maximal, sharding([X], []), mesh=[("x", 4)])
    assert kinds(found) == [("all-reduce", ("x",), 16 * 4 * 4)]
    assert reshard_collectives((16, 4), 4, maximal, maximal) == []


def test_moving_onto_one_device_gathers_like_replicating():
    maximal = TensorSharding("maximal_mesh_0", ())
    found = reshard_collectives((16, 4), 4, sharding([X], []), maximal)
    assert found == reshard_collectives((16, 4), 4, sharding([X], []), sharding([], []))
    assert kinds(found) == [("all-gather", ("x",), 16 * 4 * 4)]


def test_cli_appends_report_as_comments(tmp_path):
    source = tmp_path / "dot.mlir"
    source.write_text(
        'sdy.mesh @m = <["x"=4, "y"=2]>\n'
        'func.func @main(%a: tensor<16x32xf32> {sdy.sharding = #sdy.sharding<@m, [{}, {"x"}]>},'
        ' %b: tensor<32x64xf32> {sdy.sharding = #sdy.sharding<@m, [{"x"}, {}]>})'
        ' -> (tensor<16x64xf32> {sdy.sharding = #sdy.sharding<@m, [{"y"}, {}]>}) {\n'
        "  %0 = stablehlo.dot_general %a, %b, contracting_dims = [1] x [0]"
        " : (tensor<16x32xf32>, tensor<32x64xf32>) -> tensor<16x64xf32>\n"
        "  return %0 : tensor<16x64xf32>\n}\n"
    )
    out = subprocess.run(
        ["shardc-opt", str(source), "--shardc-propagation-pipeline", "--comm-report"],
        capture_output=True, text=True, check=True,
    ).stdout
    report = [line for line in out.splitlines() if line.startswith("// all-reduce")]
    assert len(report) == 1
    assert "2048" in report[0] and f'loc("{source}":3:8)' in report[0]
    assert "partial sums of a reduction sharded over \"x\"" in report[0]


# --------------------------------------------------------------------------- vs XLA

@pytest.fixture(scope="module")
def rows():
    from bench import comm_report

    return {row.name: row for row in map(comm_report.compare, comm_report.all_programs())}


def test_every_program_matches_xla_or_is_explained(rows):
    from bench import comm_report

    assert len(rows) >= 17
    for row in rows.values():
        if row.name in comm_report.EXPLAINED:
            continue
        assert row.within_tolerance, (row.name, row.predicted, row.xla)
        for kind, measured in row.xla.items():
            predicted = row.predicted[kind]
            assert abs(predicted - measured) <= 0.10 * max(measured, 1), (row.name, kind)


@pytest.mark.parametrize("name", ["host callback", "host callback in a branch",
                                  "argmax over a sharded axis", "sum over two sharded dimensions"])
def test_partitioner_rules_predict_xla_bytes_exactly(rows, name):
    """One program per rule of XLA's partitioner the report follows: an op on one
    device gathers its operands; a branch's results take the conditional's sharding; a
    variadic reduce all-gathers its partial results; a reduce all-reduces each sharded
    dimension apart. Every kind's bytes are XLA's, as compiled."""
    row = rows[name]
    assert row.predicted == row.xla, (row.predicted, row.xla)
    assert any(row.xla.values())


def test_host_value_used_on_the_mesh_is_broadcast():
    """A host callback's result (on one device) feeding an op on the mesh, not returned
    from a branch or the function: XLA's broadcast all-reduces the whole value over every
    device before the op, as compiled."""
    from bench import comm_report

    (program,) = comm_report.all_programs(only=["host callback result on the mesh"])
    row = comm_report.compare(program)
    assert row.xla["all-reduce"] == 32 * 4
    assert row.predicted == row.xla, (row.predicted, row.xla)


def test_table_and_json_name_every_program(rows):
    from bench import comm_report

    table = comm_report.format_table(list(rows.values()))
    assert all(name in table for name in rows)
    assert "ratio" in table.splitlines()[0]


def test_lowered_report_points_at_user_lines():
    from bench import comm_report
    from bench.models import REGISTRY

    lowered = comm_report.lower(REGISTRY["mlp_megatron"]("small"))
    report = lowered.comm_report()
    (entry,) = report.entries
    assert entry.kind == "all-reduce" and entry.bytes_per_device == 2048
    assert entry.loc.file.endswith("bench/models/mlp_megatron.py") and entry.loc.line == 23
    data = json.loads(report.to_json())
    assert data["totals"]["all-reduce"]["bytes_per_device"] == 2048
    assert data["entries"][0]["loc"].endswith("mlp_megatron.py:23:11")


def test_collective_bytes_are_the_reports_bytes():
    """``collective_bytes_at`` (the cost-aware search's price) sums what the report lists."""
    totals = []
    for program in comm_bench.all_programs():
        module = ir.Module.parse(comm_bench.lower(program).as_text(), make_context())
        report = comm_report_of(ModuleValues(module.operation, missing_as_replicated=True))
        reader = ModuleValues(module.operation, missing_as_replicated=True)
        total = sum(collective_bytes_at(reader, op) for op in range(len(reader.graph.ops)))
        assert total == sum(e.bytes_per_device for e in report.entries), program.name
        totals.append(total)
    assert any(totals)


# --------------------------------------------------------------------------- export

def _export_in_place(lowered):
    """shardc's propagation and export pipeline on the lowered module itself."""
    from shardc.compiler.passes.export_pipeline import export
    from shardc.compiler.propagation import propagate
    from shardc.compiler.stages import import_pipeline

    module = lowered.module.operation
    with module.context:
        import_pipeline(module)
        propagate(module, plan="user-priority", keep_sharding_rules=True)
        export(module)


def _boundary_mismatches(module, compiled):
    """Function arguments and results whose compiled sharding is not the module's."""
    import jax
    from jaxlib.mlir import ir

    from shardc.compiler.stages import main_func
    from shardc.dialects.sdy import named_sharding_from_attr

    func = main_func(module)
    ftype = ir.FunctionType(ir.TypeAttr(func.attributes["function_type"]).value)
    sides = [("arg_attrs", ftype.inputs, compiled.input_shardings),
             ("res_attrs", ftype.results, compiled.output_shardings)]
    bad = []
    for attr_name, types, decided in sides:
        if attr_name not in func.attributes:
            continue
        for k, (attrs, type_, got) in enumerate(
                zip(ir.ArrayAttr(func.attributes[attr_name]), types, jax.tree.leaves(decided))):
            entries = ir.DictAttr(attrs)
            if "sdy.sharding" not in entries:
                continue
            ours = named_sharding_from_attr(entries["sdy.sharding"], got.mesh)
            if not ours.is_equivalent_to(got, ir.RankedTensorType(type_).rank):
                bad.append((attr_name, k, ours.spec, got.spec))
    return bad


@pytest.fixture(scope="module")
def exported():
    from bench import comm_report as bench
    from shardc.compiler.cost.report import comm_report

    out = {}
    for program in bench.all_programs():
        lowered = bench.lower(program)
        _export_in_place(lowered)
        predicted = comm_report(lowered.module, missing_as_replicated=True).totals()
        compiled = lowered.compile()
        out[program.name] = (lowered, predicted, compiled)
    return out


def test_xla_keeps_the_exported_shardings(exported):
    """After shardc's export, XLA decides nothing: the function boundary shardings
    are ours and the collectives are exactly those our shardings imply."""
    from shardc.runtime.collectives import KINDS

    assert len(exported) >= 17
    for name, (lowered, predicted, compiled) in exported.items():
        assert _boundary_mismatches(lowered.module.operation, compiled) == [], name
        measured = compiled.collectives()
        assert {k: predicted[k].bytes_per_device for k in KINDS} == {
            k: measured[k].bytes_per_device for k in KINDS}, name


def test_native_insert_explicit_reshards_agrees():
    """Differential: jaxlib's native pass (an oracle, tests only) on the lit cases."""
    from jaxlib.mlir import ir, passmanager

    from shardc.compiler.passes.insert_explicit_reshards import insert_explicit_reshards
    from shardc.dialects import make_context

    text = (ROOT / "test/lit/passes/insert_explicit_reshards.mlir").read_text()
    context = make_context()
    for chunk in text.split("// -----"):
        with context:
            native, ours = ir.Module.parse(chunk), ir.Module.parse(chunk)
            passmanager.PassManager.parse(
                "builtin.module(func.func(sdy-insert-explicit-reshards))").run(native.operation)
            insert_explicit_reshards(ours.operation)
            assert str(ours) == str(native)


@pytest.mark.parametrize("shape, spec, out", [
    ((16, 16), ("data",), ()),                  # the rows gathered
    ((8, 16, 16), ("data",), ("data",)),        # batch-sharded: local
    ((8, 16, 16), ("data", "model"), ("data",)),  # the batch kept, the rows gathered
])
def test_custom_call_without_a_partitioner_gathers_its_non_batch_dims(shape, spec, out):
    """LAPACK's LU (a custom call whose rule shares only the batch with its results):
    XLA partitions it along the batch and all-gathers every other operand dimension."""
    import jax
    import jax.scipy.linalg as jsl
    import numpy as np
    from jax.sharding import AxisType, NamedSharding
    from jax.sharding import PartitionSpec as P

    from shardc.compiler import jit

    mesh = jax.make_mesh((4, 2), ("data", "model"), axis_types=(AxisType.Auto,) * 2)
    a = jax.device_put(np.eye(shape[-1], dtype=np.float32) * np.ones(shape, np.float32),
                       NamedSharding(mesh, P(*spec)))
    lowered = jit(lambda a: jsl.lu_factor(a)[0],
                  out_shardings=NamedSharding(mesh, P(*out))).lower(a)
    predicted = {k: t.bytes_per_device for k, t in lowered.comm_report().totals().items()}
    compiled = {k: c.bytes_per_device for k, c in lowered.compile().collectives().items()}
    assert predicted == compiled


@pytest.mark.parametrize("batch, out", [
    (("data", "fsdp"), ("fsdp", "model")),   # FSDP: scattered over fsdp, the shard over data
    (("data", "fsdp"), ("model", "fsdp")),
    (("data", "fsdp"), (None, "model")),     # reduced over both, sharded over neither
])
def test_weight_gradient_sums_its_sharded_axes_first(batch, out):
    """A dot's partial sums reduced over more axes than its result is sharded over:
    XLA all-reduces the whole buffer over the result's axes, slices it, and all-reduces
    only the slice over the rest (an FSDP weight gradient over ``fsdp`` and ``data``)."""
    import numpy as np
    from comm_comparison import mesh, predicted_and_compiled
    from jax.sharding import PartitionSpec as P

    grid = mesh((2, 2, 2), ("data", "fsdp", "model"))
    rng = np.random.default_rng(0)
    x, dy = rng.standard_normal((16, 32), np.float32), rng.standard_normal((16, 64), np.float32)
    predicted, compiled = predicted_and_compiled(
        lambda x, dy: x.T @ dy, (x, dy), (P(batch), P(batch, "model")), out=P(*out), grid=grid)
    assert predicted == compiled


@pytest.mark.parametrize("spec, out, reducer, axis, permuted", [
    # row sums of [model, -] declared [data]: XLA sums as the operand is sharded and
    # permutes the (small) sums, it does not move the operand
    (("model",), ("data",), "sum", 1, 64),
    (("model",), ("data",), "max", 1, 64),
    # the reduced dimension sharded too: partial sums all-reduced first, then moved
    (("data", "model"), ("data",), "sum", 0, 64),
])
def test_reduce_computes_as_its_operand_and_reshards_the_result(spec, out, reducer, axis,
                                                                 permuted):
    import jax.numpy as jnp
    import numpy as np
    from comm_comparison import mesh, predicted_and_compiled
    from jax.sharding import PartitionSpec as P

    grid = mesh((4, 2), ("data", "model"))
    x = np.random.default_rng(0).standard_normal((64, 64)).astype(np.float32)
    predicted, compiled = predicted_and_compiled(
        lambda a: getattr(jnp.sin(a), reducer)(axis), (x,), (P(*spec),), out=P(*out),
        grid=grid)
    assert predicted == compiled
    assert compiled["collective-permute"] == permuted


@pytest.mark.parametrize("op, specs, gathered", [
    # operands sharded alike: XLA computes the op so and gathers the one result
    ("mul", (("data", "model"), ("data", "model")), 2048),
    ("compare", (("data", "model"), ("data", "model")), 512),  # a bool result: 1 B each
    ("select", (("data", "model"),) * 3, 2048),
    # operands sharded otherwise: each is resharded to the result (the sharded one gathered)
    ("mul", (("data", "model"), ("data",)), 2048),
])
def test_elementwise_op_computes_as_operands_alike_and_reshards_the_result(op, specs,
                                                                           gathered):
    import jax
    import jax.numpy as jnp
    import numpy as np
    from comm_comparison import mesh, predicted_and_compiled
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    grid = mesh((4, 2), ("data", "model"))
    bodies = {"mul": lambda a, b: a * b, "compare": lambda a, b: a < b,
              "select": lambda a, b, c: jnp.where(a > 0, b, c)}
    rng = np.random.default_rng(0)
    args = [rng.standard_normal((32, 64)).astype(np.float32) for _ in specs]

    def fun(*xs):
        return jax.lax.with_sharding_constraint(bodies[op](*xs), NamedSharding(grid, P("data")))

    predicted, compiled = predicted_and_compiled(fun, args, [P(*s) for s in specs], grid=grid)
    assert predicted == compiled
    assert compiled["all-gather"] == gathered


def _split_heads_padded(grid):
    """[.., 64] on model=4 into 2 heads x 32, declared heads on all of model (padded)."""
    import jax
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    def fun(x, w):
        heads = (x @ w).reshape(8, 16, 2, 32)
        return jax.numpy.sin(jax.lax.with_sharding_constraint(
            heads, NamedSharding(grid, P("data", None, "model"))))
    return fun, [(8, 16, 64), (64, 64)], [P("data"), P(None, "model")]


def _merge_qkv_heads(grid):
    """3 x 2 heads x 32 (the heads on model:(1)2, head_dim on model:(2)2) merged into
    [.., 192] declared on model: model splits the major 3 unevenly (overflow)."""
    import jax
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    def fun(x):
        parts = jax.numpy.sin(x.reshape(2, 16, 3, 2, 32))
        return jax.lax.with_sharding_constraint(parts.reshape(2, 16, 192),
                                                NamedSharding(grid, P("data", None, "model")))
    return fun, [(2, 16, 3, 64)], [P("data", None, None, "model")]


@pytest.mark.parametrize("program", [_split_heads_padded, _merge_qkv_heads])
def test_reshape_xla_cannot_shard_locally_gathers_and_slices(program):
    """A reshape whose declared result no operand sharding produces: XLA reshapes the
    operand as it is sharded (or whole) and reaches the result by gathering it, every
    sharded dimension on its own (``HandleReshape``)."""
    import numpy as np
    from comm_comparison import mesh, predicted_and_compiled

    grid = mesh((2, 4), ("data", "model"))
    fun, shapes, specs = program(grid)
    rng = np.random.default_rng(0)
    args = [rng.standard_normal(shape).astype(np.float32) for shape in shapes]
    predicted, compiled = predicted_and_compiled(fun, args, specs, grid=grid)
    assert predicted == compiled
    assert compiled["all-gather"]


def test_variadic_reduce_reshards_its_other_inputs_as_the_first_and_keeps_its_partials():
    """An argmin over distances sharded on the reduced dimension, its result asked on
    the batch: XLA reshards the iota indices as the distances are (an all-to-all), reduces
    each device's part, all-gathers the partial values and indices over the reduced axis
    and reduces them again; the result is then sliced to the batch for free."""
    import jax
    import jax.numpy as jnp
    import numpy as np
    from comm_comparison import mesh, predicted_and_compiled
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    grid = mesh((8,), ("x",))
    rng = np.random.default_rng(0)
    args = [rng.standard_normal((16, 32)).astype(np.float32),
            rng.standard_normal((512, 32)).astype(np.float32)]

    def fun(h, codebook):
        distances = jax.lax.with_sharding_constraint(h @ codebook.T,
                                                     NamedSharding(grid, P(None, "x")))
        return jnp.argmin(distances, -1)

    predicted, compiled = predicted_and_compiled(fun, args, [P("x"), P("x")], out=P("x"),
                                                 grid=grid)
    assert predicted == compiled
    # h gathered for the dot, then the partial values and indices (one per device)
    assert compiled["all-gather"] == 16 * 32 * 4 + 2 * 16 * 8 * 4
