"""Differential test: ``shardc-propagation-pipeline`` against native ``sdy-propagation-pipeline``.

Inputs are inlined first (both sides). Known, deliberate differences
(``pipeline.PIPELINE_DIFFERENCES``) are classified, not failed: modules
whose calls MLIR's ``inline`` keeps (native turns them into named
computations) and modules where native inserts explicit reshards.
Everything else must be byte-identical.
"""

from __future__ import annotations

import importlib.util
import pathlib
from collections import Counter

import pytest
from jaxlib.mlir import ir, passmanager

from shardc.compiler.pipelines import propagation_pipeline
from shardc.dialects import make_context

_SPEC = importlib.util.spec_from_file_location(
    "propagation_differential",
    pathlib.Path(__file__).parents[1] / "differential" / "test_propagation_differential.py")
diff = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(diff)

# Seeds whose difference is known and not yet implemented.
KNOWN_OTHER: set[str] = set()


def classify(text: str) -> str:
    context = make_context()
    try:
        base = ir.Module.parse(text, context)
        passmanager.PassManager.parse("builtin.module(inline,symbol-dce)", context).run(
            base.operation)
        base_text = str(base)
        theirs = ir.Module.parse(base_text, context)
        passmanager.PassManager.parse("builtin.module(sdy-propagation-pipeline)", context).run(
            theirs.operation)
    except ir.MLIRError:
        return "skipped"
    ours = ir.Module.parse(base_text, context)
    propagation_pipeline(ours.operation)
    if str(ours) == str(theirs):
        return "agree"
    if "call @" in base_text:
        return "calls"
    if str(theirs).count("sdy.reshard") > str(ours).count("sdy.reshard"):
        return "explicit-reshards"
    return "other"


@pytest.mark.filterwarnings("ignore")
def test_pipeline_agrees_with_native():
    texts = [(f"rand{s}", diff.gen(s)) for s in range(40)]
    texts += [(f"man{s}", diff.gen_manual(s)) for s in range(15)]
    texts += [(f"{n}0", diff.lower(n, 0)) for n in sorted(diff.PROGRAMS)]
    texts += [(f"sm_{n}0", diff.lower_shard_map(n, 0)) for n in sorted(diff.SHARD_MAP_PROGRAMS)]
    stats: Counter = Counter()
    others = []
    for name, text in texts:
        kind = classify(text)
        stats[kind] += 1
        if kind == "other" and name not in KNOWN_OTHER:
            others.append(name)
    print(dict(stats))
    assert stats["agree"] >= 0.8 * (len(texts) - stats["skipped"])
    assert not others, others
