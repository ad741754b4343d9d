"""Run fuzz cases in a few ``cli_worker`` subprocesses, surviving crashes and hangs.

The cases are dealt round-robin to ``workers`` slots; each slot runs its
share in one worker process and watches its JSON lines. A worker that
exits without finishing (a segfault of the MLIR parser, an abort, the
memory limit) or that stays on one case past the deadline (a hang in C++,
where ``signal.alarm`` cannot reach) is killed if needed; the case it was
on is recorded as a failure and a fresh worker takes the rest of the share.
"""

from __future__ import annotations

import dataclasses
import json
import os
import select
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path

WORKER_COMMAND = (sys.executable, "-P", "-m", "fuzz.cli_worker")
# test/python, where a worker imports the package `fuzz` from (see ``worker_environment``).
TEST_PYTHON = Path(__file__).resolve().parents[1]
STARTUP_TIMEOUT_S = 120.0
# Beyond a case's alarm, how long the parent waits before it calls the case a hang.
REPORT_GRACE_S = 5.0


@dataclasses.dataclass
class CaseOutcome:
    """What happened to one case: its exit status and any broken rules."""

    index: int
    exit_status: object
    problems: list[str]
    seconds: float
    stderr_tail: str = ""
    command: str = ""  # reproduces the case (its input file is kept when it fails)


class _LineReader:
    """Whole lines from a pipe with a timeout (``os.read`` + ``select``, no buffering)."""

    def __init__(self, stream) -> None:
        self.fd = stream.fileno()
        self.buffer = b""

    def readline(self, timeout_s: float) -> bytes | None:
        """The next line; ``b""`` at end of file; None on timeout."""
        deadline = time.monotonic() + timeout_s
        while b"\n" not in self.buffer:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return None
            ready, _, _ = select.select([self.fd], [], [], remaining)
            if not ready:
                return None
            chunk = os.read(self.fd, 65536)
            if not chunk:
                line, self.buffer = self.buffer, b""
                return line
            self.buffer += chunk
        line, _, self.buffer = self.buffer.partition(b"\n")
        return line + b"\n"


def worker_environment() -> dict[str, str]:
    """This process's environment with test/python first on ``PYTHONPATH``, so that
    ``python -m fuzz.cli_worker`` finds the worker and its sibling modules."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [str(TEST_PYTHON)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    return env


def _kill(process: subprocess.Popen) -> None:
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGKILL)
    process.wait()


@dataclasses.dataclass(frozen=True)
class _Share:
    """One slot's work: its cases, where it writes, and how it is started and timed."""

    run_seed: int
    indices: list[int]
    timeout_s: float
    grace_s: float
    scratch: Path
    log: Path
    command: Sequence[str]


def _run_share(share: _Share, outcomes: dict[int, CaseOutcome]) -> None:
    """Run one slot's cases to the end, restarting the worker after each crash or hang."""
    pending = list(share.indices)
    while pending:
        job = {"run_seed": share.run_seed, "indices": pending, "timeout_s": share.timeout_s,
               "scratch_dir": str(share.scratch)}
        with open(share.log, "ab") as log_file:
            process = subprocess.Popen(
                list(share.command), stdin=subprocess.PIPE, env=worker_environment(),
                stdout=subprocess.PIPE, stderr=log_file, start_new_session=True)
        process.stdin.write(json.dumps(job).encode())
        process.stdin.close()
        reader = _LineReader(process.stdout)
        current: int | None = None
        command = ""
        started = time.monotonic()
        failure = None
        while True:
            # A case gets its alarm, plus slack for the worker to report it.
            limit = STARTUP_TIMEOUT_S if current is None else share.timeout_s + share.grace_s
            line = reader.readline(limit)
            if line is None:
                failure = f"hang: no answer within {limit:.0f} s (worker killed)"
                break
            if not line:
                _kill(process)
                failure = f"worker died with status {process.returncode} (crash)"
                break
            event = json.loads(line)
            if event["event"] == "start":
                current, started = event["index"], time.monotonic()
                command = event.get("command", "")
            elif event["event"] == "done":
                outcomes[event["index"]] = CaseOutcome(
                    event["index"], event["exit_status"], event["problems"],
                    event["seconds"], event["stderr_tail"], event.get("command", ""))
                pending.remove(event["index"])
                current = None
            elif event["event"] == "finished":
                break
        _kill(process)
        process.stdout.close()
        if failure is None:
            continue
        if current is None:
            raise RuntimeError(f"fuzz worker failed outside a case: {failure}; see {share.log}")
        outcomes[current] = CaseOutcome(
            current, None, [failure], round(time.monotonic() - started, 3), command=command)
        pending.remove(current)


def run_cases(
    run_seed: int, indices: Sequence[int], *, workers: int, timeout_s: float, scratch: Path,
    grace_s: float = REPORT_GRACE_S, command: Sequence[str] = WORKER_COMMAND,
) -> dict[int, CaseOutcome]:
    """Run the cases ``indices`` of ``run_seed``; return every case's outcome by index.

    ``command`` starts a worker speaking ``cli_worker``'s protocol (tests of
    this harness pass a fake one).
    """
    outcomes: dict[int, CaseOutcome] = {}
    scratch.mkdir(parents=True, exist_ok=True)
    shares = [list(indices[slot::workers]) for slot in range(workers)]
    errors: list[BaseException] = []

    def run_slot(slot: int) -> None:
        try:
            share = _Share(run_seed, shares[slot], timeout_s, grace_s,
                           scratch / f"worker{slot}", scratch / f"worker{slot}.log", command)
            _run_share(share, outcomes)
        except BaseException as error:  # noqa: BLE001 - re-raised in the caller
            errors.append(error)

    threads = [threading.Thread(target=run_slot, args=(slot,)) for slot in range(workers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]
    return outcomes
