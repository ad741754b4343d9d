"""The zoos' rows measured ahead, in a worker process beside the other tests.

``test_zoo.py`` and ``test_libzoo.py`` check one row per program (its module's
``measure``: jax.jit and both shardc routes lowered, compiled and run), most of the
suite's time when the rows are measured one after another in the pytest process,
whose other tests then wait. So once pytest has collected the tests it runs,
``start`` hands the rows they need to one worker process (``python -m zoo_rows``,
which calls the same ``measure`` of the same module), and each test module's
``measure_program`` takes its row from it (``take``). Rows the worker has not
started when the pytest process reaches them are measured there, from the first
on, while the worker takes its rows from the last one back. A worker that dies
while measuring (a program aborting the process) leaves that program a failed
row naming the signal (``bench.zoo.report.died``, as a child of
``report.measure_isolated``) and a fresh worker takes the rest; a program whose
``measure`` raises in the worker is measured again in the pytest process, where
it raises for its tests.

The worker is a process of its own because XLA's CPU collectives rendezvous
within a process: two programs with collectives run at once in one process can
stall each other.
"""

from __future__ import annotations

import importlib
import json
import os
import pathlib
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable

from bench.zoo import report

HERE = pathlib.Path(__file__).resolve().parent
# How often the thread feeding the worker looks for its row (or its end).
POLL_SECONDS = 0.1
# What the worker writes in place of a row when ``measure`` raised.
RAISED = {"raised": True}

Key = tuple[str, str]  # (test module, program)


class Worker:
    """One ``python -m zoo_rows`` process, measuring one row at a time."""

    def __init__(self, folder: pathlib.Path, executable: str, env: dict[str, str]):
        self.folder = folder
        self.log = tempfile.TemporaryFile(mode="w+", dir=folder)
        self.process = subprocess.Popen(
            [executable, "-m", "zoo_rows", str(folder)], cwd=HERE.parents[1], env=env,
            stdin=subprocess.PIPE, stdout=self.log, stderr=subprocess.STDOUT, text=True)

    def measure(self, key: Key) -> dict | None:
        """The row of ``key``; None where its ``measure`` raised."""
        path = row_path(self.folder, key)
        try:
            self.process.stdin.write(" ".join(key) + "\n")
            self.process.stdin.flush()
        except BrokenPipeError:  # the worker has ended: its row is a failure below
            pass
        while not path.exists():
            if self.process.poll() is not None:
                self.log.seek(0)
                return report.died(key[1], report.exit_text(self.process.returncode),
                                   self.log.read())
            time.sleep(POLL_SECONDS)
        row = json.loads(path.read_text())
        return None if row == RAISED else row

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.stdin.close()
            self.process.kill()
            self.process.wait()
        self.log.close()


class Prefetch:
    """A thread measuring ``keys`` through a ``Worker``, first to last until the
    pytest process takes one it has not started, then last to first."""

    def __init__(self, keys: Iterable[Key]):
        self._pending = list(keys)
        self._running: set[Key] = set()
        self._rows: dict[Key, dict | None] = {}
        self._from_last = False
        self._stopped = False
        self._condition = threading.Condition()
        self._folder = tempfile.TemporaryDirectory(prefix="zoo_rows_")
        # Read now: tests patch sys.executable and the environment while the thread runs.
        self._executable = sys.executable
        self._env = {**os.environ, "PYTHONPATH": os.pathsep.join(
            filter(None, [str(HERE.parents[1]), str(HERE), os.environ.get("PYTHONPATH")]))}
        self._worker: Worker | None = None
        self._thread = threading.Thread(target=self._serve, name="zoo_rows", daemon=True)
        self._thread.start()

    def take(self, key: Key) -> dict | None:
        """The row of ``key``, waiting while the worker measures it; None where the
        worker has not started it (the caller measures it) or its ``measure`` raised."""
        with self._condition:
            self._from_last = True
            if key in self._pending:
                self._pending.remove(key)
                return None
            self._condition.wait_for(lambda: key not in self._running)
            return self._rows.pop(key, None)

    def stop(self) -> None:
        """End the worker, even in the middle of a row (no test waits for it now)."""
        with self._condition:
            self._pending.clear()
            self._stopped = True
            worker = self._worker
        if worker is not None:
            worker.process.kill()
        self._thread.join()
        self._folder.cleanup()

    def _serve(self) -> None:
        try:
            while True:
                with self._condition:
                    if not self._pending or self._stopped:
                        return
                    key = self._pending.pop(-1 if self._from_last else 0)
                    self._running.add(key)
                row = None
                try:
                    with self._condition:  # a worker started after stop() would outlive it
                        if self._stopped:
                            return
                        if self._worker is None:
                            self._worker = Worker(pathlib.Path(self._folder.name),
                                                  self._executable, self._env)
                        worker = self._worker
                    row = worker.measure(key)
                    if worker.process.poll() is not None:  # died on this row
                        worker.stop()
                        self._worker = None
                finally:
                    with self._condition:
                        self._running.discard(key)
                        self._rows[key] = row
                        self._condition.notify_all()
        finally:
            if self._worker is not None:
                self._worker.stop()


_prefetch: Prefetch | None = None


def start(keys: list[Key]) -> None:
    """Measure the rows of ``keys`` (test module name, program) in a worker, in order."""
    global _prefetch
    stop()
    _prefetch = Prefetch(keys)


def stop() -> None:
    global _prefetch
    if _prefetch is not None:
        _prefetch.stop()
        _prefetch = None


def take(module_file: str, name: str, measure: Callable[[str], dict]) -> dict:
    """The row of program ``name`` of the test module at ``module_file``: the worker's
    where it measured it, else ``measure(name)`` here."""
    key = (pathlib.Path(module_file).stem, name)
    row = _prefetch.take(key) if _prefetch is not None else None
    return measure(name) if row is None else row


def row_path(folder: pathlib.Path, key: Key) -> pathlib.Path:
    return folder / f"{'.'.join(key)}.json"


def serve(folder: pathlib.Path) -> None:
    """The worker: for each ``MODULE NAME`` line read, ``MODULE.measure(NAME)`` written
    to its ``row_path`` (``RAISED`` where it raised)."""
    for line in sys.stdin:
        key = tuple(line.split())
        module, name = key
        try:
            text = json.dumps(importlib.import_module(module).measure(name))
        except Exception:  # noqa: BLE001 - the pytest process measures it again and raises
            text = json.dumps(RAISED)
        path = row_path(folder, key)
        written = path.with_suffix(".part")
        written.write_text(text)
        written.rename(path)  # whole, before the feeding thread reads it


if __name__ == "__main__":
    serve(pathlib.Path(sys.argv[1]))
