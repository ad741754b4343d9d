"""Unit tests for shardc.compiler.sharding: rule printing, builder numbering, registry."""

import warnings

import pytest
from jaxlib.mlir import ir

from shardc.compiler.sharding.builder import RuleBuilder
from shardc.compiler.sharding.rule import FactorKind, OpShardingRule, factor_name
from shardc.compiler.sharding.rules import (
    NO_RULE,
    RULES,
    UnknownOpShardingRuleWarning,
    clear_cache,
    rule_for,
    rule_from_texts,
)
from shardc.dialects import make_context


@pytest.fixture
def ctx():
    with make_context() as context:
        yield context


def ops_of(text: str) -> list[ir.Operation]:
    """Parse a module holding one func and return the ops of its body, return excluded."""
    module = ir.Module.parse(text)
    func = module.body.operations[-1]
    ops = [op.operation for op in func.regions[0].blocks[0].operations]
    ops_of.keep_alive = module  # the ops die with their module
    return ops[:-1]


def reshape_rule(in_type: str, out_type: str) -> str:
    (op,) = ops_of(
        f"func.func @f(%a: {in_type}) -> {out_type} {{\n"
        f"  %0 = stablehlo.reshape %a : ({in_type}) -> {out_type}\n"
        f"  return %0 : {out_type}\n}}"
    )
    return str(rule_for(op))


def test_factor_names_go_past_z():
    assert [factor_name(i) for i in (0, 1, 17, 18, 19, 27)] == ["i", "j", "z", "z_1", "z_2", "z_10"]


def test_printing_matches_mlir_beyond_z(ctx):
    builder = RuleBuilder([20], [20])
    for dim in range(20):
        builder.add_factor(dim, dim, dim + 2)
    rule = builder.build()
    text = str(rule)
    assert "[i, j, k, l, m, n, o, p, q, r, s, t, u, v, w, x, y, z, z_1, z_2]" in text
    assert "z_1=20, z_2=21" in text
    assert text == str(rule.to_attr())


def test_builder_numbers_factors_in_creation_order_then_fills_size_one(ctx):
    # dot-like: real factors first; unmapped dims (operand 2, result dim 1) get
    # size-1 factors afterwards, operands before results.
    builder = RuleBuilder([2, 2, 1], [2])
    builder.add_factor([0, None], 0, 8)
    builder.add_factor([1, 0], None, 4, FactorKind.REDUCTION)
    builder.add_factor([None, 1], None, 2, FactorKind.NEED_REPLICATION, blocked=True)
    rule = builder.build()
    assert rule.factor_sizes == (8, 4, 2, 1, 1)
    assert rule.operand_mappings == (((0,), (1,)), ((1,), (2,)), ((3,),))
    assert rule.result_mappings == (((0,), (4,)),)
    assert str(rule) == (
        "#sdy.op_sharding_rule<([i, j], [j, k], [l])->([i, m]) {i=8, j=4, k=2, l=1, m=1}"
        " reduction={j} need_replication={k} blocked_propagation={k}>"
    )
    assert rule.kind(1) is FactorKind.REDUCTION and rule.is_blocked(2)
    assert str(rule.to_attr()) == str(rule)


def test_builder_does_not_append_size_one_factor_to_a_mapped_dim():
    rule = RuleBuilder([1], [1]).add_factor(0, 0, 4).add_factor(0, None, 1).build()
    assert rule.operand_mappings == (((0,),),)
    assert rule.factor_sizes == (4, 1)


def test_add_factor_to_all_skips_scalars():
    rule = RuleBuilder([2, 0], [2]).add_pointwise([3, 5]).build()
    assert str(rule) == "#sdy.op_sharding_rule<([i, j], [])->([i, j]) {i=3, j=5}>"


@pytest.mark.parametrize(
    ("in_type", "out_type", "expected"),
    [
        ("tensor<8xf32>", "tensor<2x4xf32>", "([ij])->([i, j]) {i=2, j=4}"),
        ("tensor<8x4xf32>", "tensor<2x16xf32>", "([ij, k])->([i, jk]) {i=2, j=4, k=4}"),
        ("tensor<6x4xf32>", "tensor<24xf32>", "([i, j])->([ij]) {i=6, j=4}"),
    ],
)
def test_reshape_compound_factors(ctx, in_type, out_type, expected):
    assert reshape_rule(in_type, out_type) == f"#sdy.op_sharding_rule<{expected}>"


def test_reshape_without_elements_has_no_rule(ctx):
    assert reshape_rule("tensor<0x4xf32>", "tensor<4x0xf32>") == "None"


def test_round_trip_through_attr(ctx):
    text = (
        "#sdy.op_sharding_rule<([i, j], [j, k])->([i, k]) {i=8, j=32, k=16} reduction={j}"
        " need_replication={i} permutation={k} blocked_propagation={i}, custom>"
    )
    rule = OpShardingRule.from_attr(ir.Attribute.parse(text))
    assert rule.is_custom and rule.permutation_factors == (2,)
    assert str(rule) == text == str(rule.to_attr())


def test_attached_rule_wins_and_rules_never_mutate_the_op(ctx):
    custom = "#sdy.op_sharding_rule<([i, j])->([i, j]) {i=4, j=2}, custom>"
    ops = ops_of(
        "func.func @f(%a: tensor<4x2xf32>) -> tensor<4x2xf32> {\n"
        f"  %0 = stablehlo.negate %a {{sdy.sharding_rule = {custom}}} : tensor<4x2xf32>\n"
        "  %1 = stablehlo.negate %0 : tensor<4x2xf32>\n"
        "  return %1 : tensor<4x2xf32>\n}"
    )
    assert str(rule_for(ops[0])) == custom
    before = str(ops[1])
    assert str(rule_for(ops[1])) == "#sdy.op_sharding_rule<([i, j])->([i, j]) {i=4, j=2}>"
    assert str(ops[1]) == before


def test_no_rule_ops_are_silent_and_unknown_ops_warn_once(ctx):
    ops = ops_of(
        "func.func @f(%a: tensor<4xf32>) -> tensor<4xf32> {\n"
        "  %c = stablehlo.constant dense<1.0> : tensor<4xf32>\n"
        "  %0 = chlo.broadcast_add %a, %a : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>\n"
        "  %1 = chlo.broadcast_add %0, %0 : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>\n"
        "  %2 = stablehlo.custom_call @mystery(%1) : (tensor<4xf32>) -> tensor<4xf32>\n"
        "  return %2 : tensor<4xf32>\n}"
    )
    clear_cache()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert [rule_for(op) for op in ops] == [None, None, None, None]
        assert rule_for(ops[3]) is None
    messages = [str(w.message) for w in caught if w.category is UnknownOpShardingRuleWarning]
    assert sum("chlo.broadcast_add" in m for m in messages) == 1
    assert sum("@mystery" in m for m in messages) == 1
    assert all("register_sharding_rule" in m and "XLA's partitioner decides" in m
               for m in messages)


def test_unknown_op_warning_points_at_the_users_line(ctx):
    (op,) = ops_of(
        "func.func @f(%a: tensor<4xf32>) -> tensor<4xf32> {\n"
        '  %0 = chlo.broadcast_subtract %a, %a : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>'
        ' loc("model.py":42:7)\n'
        "  return %0 : tensor<4xf32>\n}"
    )
    clear_cache()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert rule_for(op) is None
    (warning,) = [w for w in caught if w.category is UnknownOpShardingRuleWarning]
    assert (warning.filename, warning.lineno) == ("model.py", 42)
    assert "op 'chlo.broadcast_subtract' has no sharding rule" in str(warning.message)


def test_concatenate_cache_key_includes_the_operands_defining_ops(ctx):
    ops = ops_of(
        "func.func @f(%a: tensor<4xf32>, %b: tensor<2xf32>) -> (tensor<4xf32>, tensor<4xf32>) {\n"
        "  %0 = stablehlo.slice %a [0:2] : (tensor<4xf32>) -> tensor<2xf32>\n"
        "  %1 = stablehlo.slice %a [2:4] : (tensor<4xf32>) -> tensor<2xf32>\n"
        "  %2 = stablehlo.concatenate %1, %0, dim = 0 : (tensor<2xf32>, tensor<2xf32>)"
        " -> tensor<4xf32>\n"
        "  %3 = stablehlo.concatenate %b, %b, dim = 0 : (tensor<2xf32>, tensor<2xf32>)"
        " -> tensor<4xf32>\n"
        "  return %2, %3 : tensor<4xf32>, tensor<4xf32>\n}"
    )
    assert rule_for(ops[2]).permutation_factors == (0,)
    assert rule_for(ops[3]).need_replication_factors == (0,)
    assert rule_for(ops[3], conservative=True).factor_sizes == (1, 1, 1)


def test_registry_tables_are_disjoint_and_prefixed():
    assert not set(RULES) & NO_RULE
    assert all(name.split(".")[0] in {"stablehlo", "chlo", "sdy", "func", "builtin"} for name in RULES)
    assert all("." in name for name in NO_RULE)


def test_bookkeeping_attributes_leave_the_cache_key(ctx):
    """Two equal ops that differ only by a ``shardc.*`` attribute (the cost-aware
    search's op numbers) share one cached rule: a key holding the number made every
    numbered op compute its rule again."""
    ops = ops_of(
        "func.func @f(%a: tensor<4x8xf32>, %b: tensor<8x2xf32>) -> tensor<4x2xf32> {\n"
        "  %0 = stablehlo.dot_general %a, %b, contracting_dims = [1] x [0]"
        " {shardc.cost_aware_id = 0 : i32} : (tensor<4x8xf32>, tensor<8x2xf32>) -> tensor<4x2xf32>\n"
        "  %1 = stablehlo.dot_general %a, %b, contracting_dims = [1] x [0]"
        " {shardc.cost_aware_id = 1 : i32} : (tensor<4x8xf32>, tensor<8x2xf32>) -> tensor<4x2xf32>\n"
        "  return %1 : tensor<4x2xf32>\n}"
    )
    clear_cache()
    first, second = (rule_for(op) for op in ops)
    assert first is not None and second is first


def test_a_key_printed_by_the_caller_is_the_registrys_own(ctx):
    """``rule_from_texts`` (the propagation graph prints the key from what it has
    read) finds the rule ``rule_for`` cached, in this context or another one."""
    text = (
        "func.func @f(%a: tensor<4xf32>) -> tensor<2x4xf32> {\n"
        "  %0 = stablehlo.broadcast_in_dim %a, dims = [1] {shardc.cost_aware_id = 3 : i32}"
        " : (tensor<4xf32>) -> tensor<2x4xf32>\n"
        "  return %0 : tensor<2x4xf32>\n}"
    )
    (op,) = ops_of(text)
    clear_cache()
    cached = rule_for(op)
    assert cached is not None
    with make_context():
        module = ir.Module.parse(text)
        other = module.body.operations[0].regions[0].blocks[0].operations[0].operation
        dims = str(other.attributes["broadcast_dimensions"])
        assert rule_from_texts(other, ("tensor<4xf32>",), ("tensor<2x4xf32>",),
                               (("broadcast_dimensions", dims),)) is cached
        del other, module
