"""opt_driver: the whole-chunk nesting depth equals a token-by-token scan; diagnostics quote
the input, split into lines only when one is printed."""

from __future__ import annotations

import io

from hypothesis import given
from hypothesis import strategies as st

from shardc.tools.opt_driver import (
    _NESTING_TOKEN,
    MAX_NESTING,
    OptConfig,
    _InputLines,
    max_nesting,
    nesting_error,
    run_opt,
)
from shardc.tools.split_input import Chunk


def _scanned_depth(text: bytes) -> int:
    depth = deepest = 0
    for token in _NESTING_TOKEN.finditer(text):
        char = token.group()
        if char in (b"[", b"{", b"("):
            depth += 1
            deepest = max(deepest, depth)
        elif char in (b"]", b"}", b")"):
            depth = max(depth - 1, 0)
    return deepest


_PIECES = st.sampled_from([b"[", b"]", b"{", b"}", b"(", b")", b'"', b"\\", b"/", b"//",
                           b"\n", b"x", b" ", b'"a(b"', b"// ((\n"])


@given(st.lists(_PIECES, max_size=60).map(b"".join))
def test_max_nesting_matches_the_token_scan(text: bytes) -> None:
    assert max_nesting(text) == _scanned_depth(text)


def test_max_nesting_skips_strings_comments_and_unmatched_closers() -> None:
    assert max_nesting(b'))) ( "((((" // [[[[\n {[]}') == 3
    assert max_nesting(b"") == 0


def _chunk(text: bytes) -> Chunk:
    return Chunk(text=text, line=1, col=1)


def test_nesting_error_reports_the_first_bracket_too_deep() -> None:
    deep = b"x\n" + b"(" * (MAX_NESTING + 1) + b")" * (MAX_NESTING + 1)
    error = nesting_error(_chunk(deep))
    assert error is not None
    assert (error.loc.line, error.loc.col) == (2, MAX_NESTING + 1)
    assert nesting_error(_chunk(b"(" * MAX_NESTING + b")" * MAX_NESTING)) is None
    # Brackets in a string do not count.
    assert nesting_error(_chunk(b'"' + b"(" * (MAX_NESTING + 1) + b'"')) is None


def test_a_diagnostic_quotes_its_source_line_with_a_caret() -> None:
    data = b"module {\n  func.func @f() {\n    %0 = bogus.op\n  }\n}\n"
    out, err = io.StringIO(), io.StringIO()
    assert not run_opt(data, "in.mlir", OptConfig(), out, err)
    assert "in.mlir:3:" in err.getvalue()
    assert "    %0 = bogus.op\n" in err.getvalue() and "^" in err.getvalue()


def test_input_lines_are_split_only_when_read() -> None:
    lines = _InputLines("in.mlir", b"a\nb")
    assert lines._lines is None
    assert lines.get("in.mlir") == ["a", "b"] and lines.get("other.mlir") is None
    assert list(lines) == ["in.mlir"] and len(lines) == 1
