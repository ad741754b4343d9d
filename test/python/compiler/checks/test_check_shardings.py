"""Sharding checks: the Python API returns what the pass reports, and
``Lowered.check()`` finds the problems of a JAX program at the user's lines."""

import inspect
import pathlib

import jax
import jax.numpy as jnp
import pytest
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P
from jaxlib.mlir import ir

import shardc.compiler as sc
from shardc.compiler.checks import CheckOptions, ShardingCheckError, check_shardings
from shardc.compiler.checks.diagnostic import ERROR_KINDS, WARNING_KINDS
from shardc.compiler.diagnostics import Severity
from shardc.dialects import make_context
from shardc.tools import opt_driver, pass_pipeline
from shardc.tools.split_input import split_input

LIT = pathlib.Path(__file__).resolve().parents[3] / "lit" / "passes"
LIT_FILES = sorted(LIT.glob("check_shardings*.mlir"))


def _parses(chunk) -> bool:
    try:
        ir.Module.parse(chunk.text, make_context())
    except ir.MLIRError:
        return False
    return True


def _chunks():
    # Chunks the sdy verifier rejects at parse time test the verifier's messages
    # (lit covers them); the API/pass comparison needs a module.
    for path in LIT_FILES:
        chunks, _ = split_input(path.read_bytes(), str(path), enabled=True)
        for chunk in filter(_parses, chunks):
            yield pytest.param(chunk, id=f"{path.name}:{chunk.line}")


@pytest.mark.parametrize("chunk", list(_chunks()))
@pytest.mark.parametrize("werror", [False, True])
def test_api_returns_what_the_pass_reports(chunk, werror):
    context = make_context()
    module = ir.Module.parse(chunk.text, context)
    spec = pass_pipeline.PassSpec("shardc-check-shardings", (("werror", str(werror).lower()),))
    result = opt_driver.process_chunk(chunk, context, opt_driver.OptConfig(specs=(spec,)))
    from_pass = {(d.severity, d.loc.line, d.message) for d in result.diagnostics}
    with context:
        found = check_shardings(module, CheckOptions(werror=werror))
    from_api = {(d.severity, d.loc.line, d.text) for d in found}
    assert from_api == from_pass
    assert result.failed == any(d.severity == Severity.ERROR for d in found)


def test_every_kind_has_a_lit_test():
    text = "".join(path.read_text() for path in LIT_FILES)
    for kind in ERROR_KINDS + WARNING_KINDS:
        assert f"[{kind}]" in text, kind


# ----------------------------------------------------------------------- Lowered.check

MESH = jax.make_mesh((4, 2), ("x", "y"), axis_types=(AxisType.Auto, AxisType.Auto))


def _s(*spec):
    return NamedSharding(MESH, P(*spec))


def _program(x, w):
    y = jax.lax.with_sharding_constraint(x[:6], _s("x", None))  # 6 rows over 4 devices
    return y @ w  # y is sharded on "x" along its rows, the result is replicated


def _lowered():
    jitted = sc.jit(_program, in_shardings=(_s("x", None), _s(None, "x")),
                    out_shardings=_s(None, None))
    return jitted.lower(jax.ShapeDtypeStruct((8, 16), jnp.float32),
                        jax.ShapeDtypeStruct((16, 32), jnp.float32))


def _line_of(text):
    lines, start = inspect.getsourcelines(_program)
    return start + next(i for i, line in enumerate(lines) if text in line)


def test_lowered_check_reports_at_the_user_lines():
    found = _lowered().check()
    by_kind = {}
    for diagnostic in found:
        by_kind.setdefault(diagnostic.kind, []).append(diagnostic)
    assert {"indivisible-dimension", "implicit-reshard", "replicated-output"} <= set(by_kind)
    constraint_line = _line_of("with_sharding_constraint")
    assert any(d.loc.file == __file__ and d.loc.line == constraint_line
               for d in by_kind["indivisible-dimension"])
    (dot,) = [d for d in by_kind["implicit-reshard"] if d.op == "stablehlo.dot_general"]
    assert dot.loc.file == __file__ and dot.loc.line == _line_of("return y @ w")
    # 6 rows over 4 devices are gathered as 8 padded rows of 16 floats.
    assert "all-gather" in dot.message and "512 bytes per device" in dot.message
    assert all(d.severity == Severity.WARNING for d in found)
    assert "[implicit-reshard]" in str(dot) and str(dot).startswith(f"{__file__}:")


def test_lowered_check_thresholds_and_werror():
    lowered = _lowered()
    quiet = lowered.check(reshard_threshold_bytes=1 << 30)
    assert not [d for d in quiet if d.kind == "implicit-reshard"]
    assert lowered.check(raise_on_error=True)  # only warnings: nothing raised
    with pytest.raises(ShardingCheckError) as error:
        lowered.check(werror=True, raise_on_error=True)
    assert error.value.diagnostics and all(
        d.severity == Severity.ERROR for d in error.value.diagnostics)
    assert isinstance(error.value, sc.ShardingError)


def test_lowered_check_leaves_the_module_alone():
    lowered = _lowered()
    before = lowered.as_text(debug_info=True)
    lowered.check()
    lowered.comm_report()
    assert lowered.as_text(debug_info=True) == before
