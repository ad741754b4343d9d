"""Pipeline text parsing, printing and resolution."""

from __future__ import annotations

import pytest

from shardc.compiler.passes.drop_shardings import DropShardingsPass
from shardc.compiler.passes.lift_inlined_meshes import LiftInlinedMeshesPass
from shardc.tools import pass_pipeline
from shardc.tools.pass_pipeline import PassSpec, PipelineError, format_pipeline, parse_pipeline


@pytest.mark.parametrize(
    "text",
    [
        "builtin.module(shardc-drop-shardings)",
        "builtin.module(shardc-drop-shardings{keep-meshes=true strict=false},cse)",
        "builtin.module(sdy-lift-inlined-meshes,func.func(canonicalize,cse),symbol-dce)",
        'builtin.module(canonicalize{max-iterations=3 region-simplify="normal"})',
    ],
)
def test_round_trip(text: str) -> None:
    specs = parse_pipeline(text)
    assert format_pipeline(specs) == text
    assert parse_pipeline(format_pipeline(specs)) == specs


def test_bare_list_and_spaces() -> None:
    assert parse_pipeline(" a , b{ k=v  k2=w } ") == (
        PassSpec("a"), PassSpec("b", (("k", "v"), ("k2", "w")))
    )


@pytest.mark.parametrize("text", ["builtin.module(", "a{k=v", "a,,b", "a)", "builtin.module(a),b"])
def test_malformed(text: str) -> None:
    with pytest.raises(PipelineError):
        parse_pipeline(text)


def test_resolve_ours_alias_and_native() -> None:
    assert pass_pipeline.resolve(PassSpec("shardc-drop-shardings", (("strict", "1"),))) == (
        DropShardingsPass(strict=True)
    )
    assert isinstance(pass_pipeline.resolve(PassSpec("sdy-lift-inlined-meshes")), LiftInlinedMeshesPass)
    assert pass_pipeline.resolve(PassSpec("cse")) == "cse"


def test_resolve_rejects_unknown_and_foreign() -> None:
    with pytest.raises(PipelineError, match="did you mean 'shardc-drop-shardings'"):
        pass_pipeline.resolve(PassSpec("shardc-drop-sharding"))
    with pytest.raises(PipelineError, match="native pass of another project"):
        pass_pipeline.resolve(PassSpec("sdy-import-pipeline"))
    # A foreign prefix on a name nobody registers is a plain unknown pass.
    with pytest.raises(PipelineError, match="unknown pass 'sdy-propogation-pipeline'; did you "
                                            "mean 'sdy-propagation-pipeline'"):
        pass_pipeline.resolve(PassSpec("sdy-propogation-pipeline"))
