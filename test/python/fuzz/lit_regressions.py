"""Save the shrunk failing case of a property test as a lit test in ``test/lit/regressions/``.

When a hypothesis property fails, hypothesis shrinks the input and replays
the smallest failing example once more as its *final* run. ``saved_on_failure``
wraps the checks of one example: if they raise during that final run it
writes the example's lowered module as ``test/lit/regressions/<name>_<hash>.mlir``
with

* a comment block holding the program (its ``repr`` rebuilds it in Python)
  and the error,
* ``// RUN: shardc-opt %s <pass flags> | filecheck %s`` (the pass flags are
  those of the failing property, e.g. ``-shardc-basic-propagate``; lit's
  pipefail makes a crash or error diagnostic fail the test),
* ``CHECK`` lines for the mesh symbols and function names the output must keep,

then adds the file path to the exception's notes and re-raises. Failures of
numerical properties cannot be re-checked by FileCheck: their file still
passes lit, and records the module and program for whoever debugs it.
``SHARDC_SAVE_REGRESSIONS=0`` turns saving off.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

REGRESSIONS_DIR = Path(__file__).resolve().parents[2] / "lit" / "regressions"
_MESH_LINE = re.compile(r"^\s*(sdy\.mesh @[\w$.]+ = <.*?>)", re.M)
_FUNC_NAME = re.compile(r"^\s*func\.func (?:public |private )?@([\w$.]+)", re.M)


def _comment(text: str) -> list[str]:
    """Comment lines that lit and FileCheck will not read as directives."""
    safe = re.sub(r"\b(RUN|CHECK|XFAIL|REQUIRES|UNSUPPORTED)(\S*:)", r"\1_\2", text)
    return [f"// {line}".rstrip() for line in safe.splitlines()]


def _escape_for_filecheck(text: str) -> str:
    return text.replace("{{", "{{\\{\\{}}").replace("[[", "{{\\[\\[}}")


def regression_text(module_text: str, *, description: str, pass_flags: Sequence[str]) -> str:
    """The contents of a regression lit file for ``module_text``."""
    run = " ".join(["shardc-opt", "%s", *pass_flags])
    lines = _comment(description)
    lines.append(f"// RUN: {run} | filecheck %s")
    for mesh in _MESH_LINE.findall(module_text):
        lines.append(f"// CHECK: {_escape_for_filecheck(mesh)}")
    for name in _FUNC_NAME.findall(module_text):
        lines.append(f"// CHECK-LABEL: func.func {{{{.*}}}}@{name}(")
    return "\n".join(lines) + "\n\n" + module_text.rstrip("\n") + "\n"


def save_regression(
    name: str, module_text: str, *, description: str, pass_flags: Sequence[str] = (),
    directory: Path = REGRESSIONS_DIR,
) -> Path:
    """Write the regression file (named after ``name`` and the module's hash); return it."""
    digest = hashlib.sha256(module_text.encode()).hexdigest()[:8]
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{name}_{digest}.mlir"
    path.write_text(regression_text(module_text, description=description,
                                    pass_flags=pass_flags))
    return path


def is_final_hypothesis_run() -> bool:
    """Whether hypothesis is replaying its shrunk failing example (the run to save)."""
    try:
        from hypothesis.control import current_build_context

        return bool(current_build_context().is_final)
    except Exception:  # noqa: BLE001 - outside hypothesis: every failure is final
        return True


@contextlib.contextmanager
def saved_on_failure(
    name: str, module_text: Callable[[], str | None], describe: Callable[[], str],
    pass_flags: Sequence[str] = (), directory: Path | None = None,
) -> Iterator[None]:
    """Save a regression if the body raises on the final (shrunk) example, then re-raise."""
    try:
        yield
    except Exception as error:
        if os.environ.get("SHARDC_SAVE_REGRESSIONS", "1") != "0" and is_final_hypothesis_run():
            text = module_text()
            if text:
                description = f"{describe()}\nerror: {type(error).__name__}: {error}"[:6000]
                path = save_regression(name, text, description=description,
                                       pass_flags=pass_flags,
                                       directory=directory or REGRESSIONS_DIR)
                error.add_note(f"shrunk case saved as lit test {path}")
        raise
