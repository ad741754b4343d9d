"""Differential test: shardc's op sharding rules against Shardy's native registry.

A seeded generator writes several hundred small StableHLO/sdy ops (random
shapes, size-1 and size-0 dims, random attributes) as MLIR text, one func per
op. For each op we compute ``rule_for(op)`` and then run jaxlib's native
``sdy-basic-propagate{keep-sharding-rules=true}`` (the oracle, tests only),
which leaves the rule it used on every op it visits; the two must print the
same, or both be absent. The same is done with ``conservative-propagation``,
and our ``populate_op_sharding_rules`` pass is compared with the native
``sdy-populate-op-sharding-rules`` on the whole module (nested ops included).
Run it as ``PYTHONPATH=test/python python -m differential.test_sharding_rules_differential
[N]`` (from the repository root) to print the first N mismatches.
"""

from __future__ import annotations

import warnings
from collections import Counter

import pytest
from differential.sharding_rule_cases import KINDS, MESH, ORACLE, Case, generate_cases
from jaxlib.mlir import ir, passmanager

from shardc.compiler.sharding.rule import OpShardingRule
from shardc.compiler.sharding.rules import UnknownOpShardingRuleWarning, rule_for
from shardc.dialects import make_context


def module_text(cases: list[Case]) -> str:
    # The native pass looks up a `main` entry function, so give it an empty one.
    main = "  func.func @main() {\n    return\n  }"
    return MESH + "\n" + main + "\n" + "\n".join(case.text(i) for i, case in enumerate(cases))


def top_level_ops(module: ir.Module):
    """(case index, op) for every op directly in a case's body, terminators excluded."""
    for op in module.body.operations:
        if op.operation.name != "func.func" or not ir.StringAttr(
            op.attributes["sym_name"]
        ).value.startswith("case"):
            continue
        index = int(ir.StringAttr(op.attributes["sym_name"]).value[len("case"):])
        for inner in op.regions[0].blocks[0].operations:
            if inner.operation.name != "func.return":
                yield index, inner.operation


def compare(cases: list[Case], *, conservative: bool) -> tuple[list[str], Counter]:
    """Run ours and the oracle on one module; return mismatch reports and op counts."""
    text = module_text(cases)
    with make_context():
        module = ir.Module.parse(text)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UnknownOpShardingRuleWarning)
            ours = [(i, op.name, rule_for(op, conservative)) for i, op in top_level_ops(module)]
        option = " conservative-propagation=true" if conservative else ""
        passmanager.PassManager.parse(ORACLE % option).run(module.operation)
        theirs = [
            op.attributes["sdy.sharding_rule"] if "sdy.sharding_rule" in op.attributes else None
            for _, op in top_level_ops(module)
        ]
        assert len(ours) == len(theirs)
        mismatches, counts = [], Counter()
        for (index, name, mine), native in zip(ours, theirs):
            counts[name] += 1
            expected = None if native is None else str(OpShardingRule.from_attr(native))
            if expected is not None:
                assert expected == str(native)  # our printer agrees with MLIR's
            got = None if mine is None else str(mine)
            if got != expected:
                mismatches.append(f"case{index} ({cases[index].kind}) {name}:\n"
                                  f"  ours:   {got}\n  native: {expected}\n"
                                  f"  {case_line(cases[index], name)}")
        return mismatches, counts


def case_line(case: Case, name: str) -> str:
    short = name.split(".", 1)[1]
    return next((line for line in case.lines if short in line), case.lines[-1])


@pytest.fixture(scope="module")
def cases() -> list[Case]:
    return generate_cases()


@pytest.mark.parametrize("conservative", [False, True], ids=["default", "conservative"])
def test_rules_match_native_shardy(cases, conservative):
    mismatches, counts = compare(cases, conservative=conservative)
    assert len(cases) >= 300 and set(KINDS) <= {c.kind for c in cases}
    assert not mismatches, f"{len(mismatches)} of {sum(counts.values())} ops differ:\n" + \
        "\n".join(mismatches[:20])


@pytest.mark.parametrize("conservative", [False, True], ids=["default", "conservative"])
def test_populate_pass_matches_native_populate(cases, conservative):
    """Our pass and Shardy's populate pass print the same module (nested ops included)."""
    from shardc.compiler.passes.populate_op_sharding_rules import populate_op_sharding_rules

    text = module_text(cases)
    option = "{conservative-propagation=true}" if conservative else ""
    with make_context():
        ours, native = ir.Module.parse(text), ir.Module.parse(text)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UnknownOpShardingRuleWarning)
            populate_op_sharding_rules(ours.operation, conservative=conservative)
        passmanager.PassManager.parse(
            f"builtin.module(func.func(sdy-populate-op-sharding-rules{option}))"
        ).run(native.operation)
        differing = [
            (a, b) for a, b in zip(str(ours).splitlines(), str(native).splitlines()) if a != b
        ]
        assert not differing, "\n".join(f"ours:   {a}\nnative: {b}" for a, b in differing[:10])


if __name__ == "__main__":
    import sys

    for conservative in (False, True):
        found, counted = compare(generate_cases(), conservative=conservative)
        print(f"conservative={conservative}: {len(found)} mismatches of "
              f"{sum(counted.values())} ops")
        print("\n".join(found[: int(sys.argv[1]) if len(sys.argv) > 1 else 30]))
