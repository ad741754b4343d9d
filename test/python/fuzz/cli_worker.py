"""A fuzz worker: runs ``shardc-opt``'s ``main(argv)`` in-process on a batch of cases.

Started by ``cli_pool`` as ``python -m fuzz.cli_worker`` (test/python on
``PYTHONPATH``) with a JSON job on stdin
(``{"run_seed", "indices", "timeout_s", "scratch_dir"}``). For each case it
writes its input to ``scratch_dir/case_<i>.mlir`` and a
``{"event": "start", "index": i, "command": ...}`` line *before* running it
and a ``{"event": "done", ...}`` line after, so that when the MLIR parser
segfaults or hangs in C++ the parent knows which case killed the worker.
Inputs of failing cases are kept as reproducers (the lit corpus may change
while a long run goes on, so the files, not the indices, are the record).

In-process runs cost a few milliseconds instead of a ~0.4 s interpreter
start. A Python-level hang is cut by ``signal.alarm`` (raising a
``BaseException`` the CLI's ``except Exception`` cannot swallow); a hang in
C++ never returns to Python, and the parent kills the worker instead.
"""

from __future__ import annotations

import contextlib
import io
import json
import resource
import signal
import sys
import time
import traceback
from pathlib import Path

from fuzz import cli_cases, mlir_corpus

from shardc.tools import shardc_opt

# A mutated 2**40-element dense constant must fail, not swap the machine to death.
MEMORY_LIMIT_BYTES = 6 << 30


class CaseTimeout(BaseException):
    """Raised by the alarm; a BaseException so the CLI's catch-all lets it through."""


def _on_alarm(signum, frame):
    raise CaseTimeout()


def emit(event: dict) -> None:
    sys.__stdout__.write(json.dumps(event) + "\n")
    sys.__stdout__.flush()


def run_in_process(argv: list[str], timeout_s: float) -> tuple[object, str, str, str | None]:
    """Run ``main(argv)``; return (exit status, stdout, stderr, escaped exception or None)."""
    out, err = io.StringIO(), io.StringIO()
    escaped = None
    status: object = None
    signal.setitimer(signal.ITIMER_REAL, timeout_s)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                status = shardc_opt.main(argv)
            except SystemExit as exit_:
                status = exit_.code
    except CaseTimeout:
        escaped = f"timed out after {timeout_s} s (Python-level hang)"
    except BaseException:  # noqa: BLE001 - any escape from main() is what we look for
        escaped = "uncaught exception from main():\n" + traceback.format_exc()[-3000:]
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
    return status, out.getvalue(), err.getvalue(), escaped


def main() -> None:
    job = json.loads(sys.stdin.read())
    with contextlib.suppress(ValueError, OSError):
        resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT_BYTES, MEMORY_LIMIT_BYTES))
    signal.signal(signal.SIGALRM, _on_alarm)
    seeds = mlir_corpus.load_seeds()
    scratch = Path(job["scratch_dir"])
    scratch.mkdir(parents=True, exist_ok=True)
    emit({"event": "ready"})
    for index in job["indices"]:
        case = cli_cases.build_case(job["run_seed"], index, seeds)
        input_path = scratch / f"case_{index}.mlir"
        input_path.write_bytes(case.data)
        emit({"event": "start", "index": index,
              "command": "shardc-opt " + " ".join([str(input_path), *case.flags])})
        started = time.perf_counter()
        status, stdout, stderr, escaped = run_in_process(
            [str(input_path), *case.flags], job["timeout_s"])
        problems = [escaped] if escaped else cli_cases.problems_of(case, status, stdout, stderr)
        if not problems:
            input_path.unlink()  # failing inputs stay, as the reproducer
        emit({
            "event": "done",
            "index": index,
            "exit_status": status,
            "problems": problems,
            "seconds": round(time.perf_counter() - started, 4),
            "stderr_tail": stderr[-1500:] if problems else "",
            "command": "shardc-opt " + " ".join([str(input_path), *case.flags]),
        })
    emit({"event": "finished"})


if __name__ == "__main__":
    main()
