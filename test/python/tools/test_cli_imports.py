"""The CLI path must never import jax (start-up time, and no accidental coupling)."""

from __future__ import annotations

import subprocess
import sys


def test_importing_shardc_opt_leaves_jax_out() -> None:
    code = (
        "import sys, shardc.tools.shardc_opt, shardc.tools.opt_driver; "
        "bad = sorted(m for m in sys.modules if m == 'jax' or m.startswith('jax.')); "
        "print(bad); sys.exit(1 if bad else 0)"
    )
    result = subprocess.run([sys.executable, "-P", "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_bad_input_gives_no_traceback(tmp_path) -> None:
    bad = tmp_path / "bad.mlir"
    bad.write_bytes(b"func.func @f( {\n")
    result = subprocess.run(
        [sys.executable, "-P", "-m", "shardc.tools.shardc_opt", str(bad)],
        capture_output=True, text=True,
    )
    assert result.returncode == 1
    assert f"{bad}:1:" in result.stderr and "Traceback" not in result.stderr
