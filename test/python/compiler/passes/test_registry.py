"""The pass registry: unique prefixed names, summaries, a lit test per pass."""

from __future__ import annotations

import re
from pathlib import Path

from shardc.compiler.passes import ALL_PASSES, PASSES_BY_NAME

REPO = Path(__file__).resolve().parents[4]


def test_names_unique_and_prefixed() -> None:
    names = [n for p in ALL_PASSES for n in (p.name, *p.aliases)]
    assert len(names) == len(set(names))
    for pass_class in ALL_PASSES:
        assert re.fullmatch(r"shardc-[a-z]+(-[a-z]+)*", pass_class.name)
        assert pass_class.__name__.endswith("Pass")
        assert set(PASSES_BY_NAME) >= {pass_class.name, *pass_class.aliases}


def test_registry_is_sorted() -> None:
    assert list(ALL_PASSES) == sorted(ALL_PASSES, key=lambda p: p.name)


def test_every_pass_has_a_summary_and_option_help() -> None:
    for pass_class in ALL_PASSES:
        doc = pass_class.__dict__.get("__doc__") or ""
        assert doc and not doc.startswith(pass_class.__name__ + "("), pass_class
        summary = pass_class.summary()
        assert summary and len(summary) <= 72 and not summary.endswith(".")
        for info in pass_class.option_infos():
            assert info.help, (pass_class.name, info.flag)


def test_every_pass_has_a_lit_test() -> None:
    # A pass is tested by lit when some RUN line runs it, by name or alias
    # (test/lit/passes/<module>.mlir, or a family folder such as sharding_rules/).
    run_lines = "\n".join(
        line
        for path in (REPO / "test" / "lit").rglob("*.mlir")
        if "Output" not in path.parts
        for line in path.read_text(errors="replace").splitlines()
        if "RUN:" in line
    )
    for pass_class in ALL_PASSES:
        names = (pass_class.name, *pass_class.aliases)
        assert any(f"-{name}" in run_lines for name in names), pass_class.name
