"""``shardc-opt``'s ``main(argv)`` called in-process (tests, notebooks, the fuzzer)."""

from __future__ import annotations

import contextlib
import io

from shardc.tools import shardc_opt

MODULE = "func.func @f(%a: tensor<4xf32>) -> tensor<4xf32> {\n  return %a : tensor<4xf32>\n}\n"


def test_default_output_goes_to_a_redirected_stdout_not_a_file(tmp_path, monkeypatch):
    # Under redirect_stdout sys.stdout is a StringIO: "-" still means stdout.
    monkeypatch.chdir(tmp_path)
    (tmp_path / "in.mlir").write_text(MODULE)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert shardc_opt.main(["in.mlir"]) == 0
    assert "func.func @f" in out.getvalue()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.mlir"]


def test_output_file_is_written(tmp_path):
    source, target = tmp_path / "in.mlir", tmp_path / "out.mlir"
    source.write_text(MODULE)
    assert shardc_opt.main([str(source), "-o", str(target)]) == 0
    assert "func.func @f" in target.read_text()
