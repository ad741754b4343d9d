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


# A standard stream closed by the caller (`shardc-opt - <&-`) is None in Python;
# each was an AttributeError reported as an internal error (and a traceback from
# the final flush of a closed stdout).
def test_a_closed_stdin_is_an_error(monkeypatch, capsys):
    monkeypatch.setattr("sys.stdin", None)
    assert shardc_opt.main(["-"]) == 1
    assert capsys.readouterr().err == "shardc-opt: error: could not read standard input: it is closed\n"


def test_a_closed_stdout_is_an_error_unless_the_output_goes_to_a_file(tmp_path, monkeypatch, capsys):
    source, target = tmp_path / "in.mlir", tmp_path / "out.mlir"
    source.write_text(MODULE)
    monkeypatch.setattr("sys.stdout", None)
    for argv in ([str(source)], ["--list-passes"]):
        assert shardc_opt.main(argv) == 1
        assert capsys.readouterr().err == (
            "shardc-opt: error: could not write to standard output: it is closed (pass -o FILE)\n")
    assert shardc_opt.main([str(source), "-o", str(target), "--mlir-timing"]) == 0
    assert "func.func @f" in target.read_text()


def test_a_closed_stderr_keeps_the_exit_status(tmp_path, monkeypatch):
    source = tmp_path / "in.mlir"
    source.write_text(MODULE)
    monkeypatch.setattr("sys.stderr", None)
    with contextlib.redirect_stdout(io.StringIO()):
        assert shardc_opt.main([str(source)]) == 0
        source.write_text("func.func @f(")
        assert shardc_opt.main([str(source)]) == 1
