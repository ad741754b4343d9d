"""Differential tests: data-flow edge passes against jaxlib's native ones.

``shardc-add-data-flow-edges`` must reproduce native text *and* use-list
order (the worklist depends on it); ``shardc-sink-data-flow-edges`` and the
add -> propagate -> sink sequence must reproduce native text. Inputs: the
random and JAX corpora of the propagation differential test, including
while/case/optimization-barrier and manual computations.
"""

from __future__ import annotations

import importlib.util
import pathlib

import pytest
from jaxlib.mlir import ir, passmanager

from shardc.compiler.propagation import propagate
from shardc.compiler.stages.data_flow_edges import add_data_flow_edges, sink_data_flow_edges
from shardc.dialects import make_context

_SPEC = importlib.util.spec_from_file_location(
    "propagation_differential",
    pathlib.Path(__file__).parents[2] / "differential" / "test_propagation_differential.py")
diff = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(diff)


def use_lists(module: ir.Module) -> list:
    """Every value's uses as (user position, operand number), in use-list order."""
    ops = diff_ops(module.operation)
    index = {op: i for i, op in enumerate(ops)}
    out = []
    for op in ops:
        values = list(op.results)
        for region in op.regions:
            for block in region.blocks:
                values.extend(block.arguments)
        for value in values:
            out.append([(index[u.owner], u.operand_number) for u in value.uses])
    return out


def diff_ops(root):
    ops = []
    root.walk(lambda op: ops.append(op) or ir.WalkResult.ADVANCE, ir.WalkOrder.PRE_ORDER)
    return ops


def _native(text, context, pipeline):
    module = ir.Module.parse(text, context)
    passmanager.PassManager.parse(f"builtin.module({pipeline})", context).run(module.operation)
    return module


def corpus():
    texts = [diff.gen(seed) for seed in range(0, 120, 3)]
    texts += [diff.gen_manual(seed) for seed in range(20)]
    for name in ("scan", "cond", "switch", "while"):
        texts.append(diff.lower(name, 0))
    for name in sorted(diff.SHARD_MAP_PROGRAMS):
        texts.append(diff.lower_shard_map(name, 1))
    return texts


@pytest.fixture(scope="module")
def texts():
    return corpus()


@pytest.mark.filterwarnings("ignore")
def test_add_edges_text_and_use_lists_match(texts):
    checked = 0
    for text in texts:
        context = make_context()
        try:
            theirs = _native(text, context, "inline,sdy-add-data-flow-edges")
        except ir.MLIRError:
            continue
        ours = _native(text, context, "inline")
        add_data_flow_edges(ours.operation)
        assert str(ours) == str(theirs)
        assert use_lists(ours) == use_lists(theirs)
        checked += 1
    assert checked > 40


@pytest.mark.filterwarnings("ignore")
@pytest.mark.parametrize("strategy", ["basic", "user-priority"])
def test_add_propagate_sink_matches(texts, strategy):
    native = {"basic": "sdy-basic-propagate", "user-priority": "sdy-user-priority-propagate"}
    checked = 0
    for text in texts:
        context = make_context()
        try:
            theirs = _native(text, context, f"inline,sdy-add-data-flow-edges,{native[strategy]},"
                             "func.func(sdy-sink-data-flow-edges)")
        except ir.MLIRError:
            continue
        ours = _native(text, context, "inline")
        add_data_flow_edges(ours.operation)
        propagate(ours.operation, plan=strategy)
        sink_data_flow_edges(ours.operation)
        assert str(ours) == str(theirs), text
        checked += 1
    assert checked > 40
