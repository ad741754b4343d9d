"""register_sharding_rule: einsum-like specs and builder functions for custom call
targets and for ops without a rule of shardc's."""

import jax
import jax.numpy as jnp
import pytest
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

import shardc.compiler as sc
from shardc.compiler.sharding.builder import RuleBuilder
from shardc.compiler.sharding.rule import FactorKind
from shardc.compiler.sharding.user_rules import parse_spec, unregister_sharding_rule


def _matmul(a, b):
    call = jax.ffi.ffi_call("user_rule_matmul",
                            jax.ShapeDtypeStruct((a.shape[0], b.shape[1]), a.dtype))
    return jnp.tanh(call(a, b))


@pytest.fixture
def mesh():
    yield jax.make_mesh((2, 4), ("x", "y"), axis_types=(jax.sharding.AxisType.Auto,) * 2)
    unregister_sharding_rule("user_rule_matmul")


def _lower(mesh):
    ins = (NamedSharding(mesh, P("x", "y")), NamedSharding(mesh, P("y", None)))
    return sc.jit(_matmul, in_shardings=ins).lower(jnp.ones((16, 32)), jnp.ones((32, 8)))


def test_spec_parsing():
    spec = parse_spec("b i j, b j k -> b i k")
    assert spec.operands == (("b", "i", "j"), ("b", "j", "k")) and spec.factors == list("bijk")
    assert spec.kind("j") == FactorKind.REDUCTION and spec.kind("i") == FactorKind.PASS_THROUGH
    assert parse_spec("ij->ij", need_replication="j").kind("j") == FactorKind.NEED_REPLICATION
    with pytest.raises(ValueError, match="exactly one"):
        parse_spec("ij,jk")
    with pytest.raises(ValueError, match="not in the spec"):
        parse_spec("ij->ij", reduction="q")


def test_spec_rule_used_by_propagation_checks_and_strict_mode(mesh):
    sc.register_sharding_rule("user_rule_matmul", "ij,jk->ik", reduction="j")
    lowered = _lower(mesh)
    text = lowered.as_text(propagated=True)
    assert "([i, j], [j, k])->([i, k]) {i=16, j=32, k=8} reduction={j}, custom" in text
    assert 'custom_call @user_rule_matmul' in text and '<@mesh, [{"x"}, {}]>' in text
    (entry,) = lowered.comm_report().entries
    assert entry.kind == "all-reduce" and entry.axes == ("y",)
    ins = (NamedSharding(mesh, P("x", "y")), NamedSharding(mesh, P("y", None)))
    sc.jit(_matmul, in_shardings=ins, strict=True).lower(jnp.ones((16, 32)), jnp.ones((32, 8)))


def test_builder_function_rule(mesh):
    def rule(op):
        # Row-wise kernel: rows pass through, the contraction needs replication.
        return (RuleBuilder.for_op(op)
                .add_factor([0, None], [0], 16)
                .add_factor([1, 0], [None], 32, FactorKind.NEED_REPLICATION)
                .add_factor([None, 1], [1], 8)
                .build())

    sc.register_sharding_rule("user_rule_matmul", rule)
    text = _lower(mesh).as_text(propagated=True)
    assert "need_replication={j}, custom" in text


def test_rank_mismatch_is_reported(mesh):
    sc.register_sharding_rule("user_rule_matmul", "ijk,jk->ik")
    with pytest.raises(ValueError, match="operand ranks"):
        _lower(mesh)


def test_rule_for_an_op_name(mesh):
    # chlo.broadcast_subtract has no rule of shardc's: an op-name rule teaches it.
    module = """
    sdy.mesh @mesh = <["x"=2, "y"=4]>
    func.func @main(%a: tensor<16x8xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"x"}, {"y"}]>},
                    %b: tensor<16x8xf32>) -> tensor<16x8xf32> {
      %0 = chlo.broadcast_subtract %a, %b : (tensor<16x8xf32>, tensor<16x8xf32>) -> tensor<16x8xf32>
      return %0 : tensor<16x8xf32>
    }"""
    from jaxlib.mlir import ir

    from shardc.compiler.pipelines import propagation_pipeline
    from shardc.dialects import make_context

    sc.register_sharding_rule("chlo.broadcast_subtract", "ij,ij->ij")
    try:
        with make_context():
            lowered = ir.Module.parse(module)
            propagation_pipeline(lowered.operation)
            text = str(lowered)
    finally:
        unregister_sharding_rule("chlo.broadcast_subtract")
    assert 'chlo.broadcast_subtract %arg0, %arg1 {sdy.sharding = #sdy.sharding_per_value<[<@mesh, [{"x"}, {"y"}]>]>}' in text
    assert "custom" not in text  # an op rule is not a custom call's: not exported


def test_a_rule_registered_later_is_a_new_lowering(mesh):
    # Jits of one function made with the same arguments share their lowerings; a rule
    # registered after the first lowering must still reach the second.
    before = _lower(mesh).as_text(propagated=True)
    assert "reduction={j}, custom" not in before
    sc.register_sharding_rule("user_rule_matmul", "ij,jk->ik", reduction="j")
    assert "reduction={j}, custom" in _lower(mesh).as_text(propagated=True)
