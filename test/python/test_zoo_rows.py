"""The worker measuring the zoos' rows beside the other tests (``zoo_rows``)."""

import os
import time

import pytest
import zoo_rows

# A test module as the worker imports it: its ``measure`` gives a row, aborts the
# process or raises.
FAKE_ZOO = """\
import os
import time

def measure(name):
    if name == "sleeps":
        time.sleep(3600)
    if name == "aborts":
        print("F0000 Check failed: the fake program aborts", flush=True)
        os.abort()
    if name == "raises":
        raise ValueError(name)
    return {"name": name, "pid": os.getpid()}
"""


@pytest.fixture
def fake_zoo(tmp_path, monkeypatch):
    (tmp_path / "fake_zoo.py").write_text(FAKE_ZOO)
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    return "fake_zoo"


def test_worker_measures_each_row_and_survives_a_program_that_aborts(fake_zoo):
    names = ("first", "aborts", "raises", "after")
    prefetch = zoo_rows.Prefetch([(fake_zoo, name) for name in names])
    try:
        prefetch._thread.join(timeout=300)  # every row measured, first to last
        rows = {name: prefetch.take((fake_zoo, name)) for name in names}
    finally:
        prefetch.stop()
    assert rows["first"]["name"] == "first" and rows["first"]["pid"] != os.getpid()
    assert rows["aborts"]["error"] == (
        "process aborted by SIGABRT: Check failed: the fake program aborts")
    assert rows["aborts"]["jax_error"].startswith("not measured: process aborted by SIGABRT")
    # A program whose measure raised is measured again by the caller, to raise there.
    assert rows["raises"] is None
    # A fresh worker took the rows after the one that aborted.
    assert rows["after"]["name"] == "after" and rows["after"]["pid"] != rows["first"]["pid"]


def test_rows_not_started_are_measured_by_the_caller(fake_zoo):
    names = [f"program{i}" for i in range(40)]
    prefetch = zoo_rows.Prefetch([(fake_zoo, name) for name in names])
    try:
        # The caller takes rows in order: those the worker has not started yet it
        # measures itself, and the worker goes on from the last one back.
        rows = [prefetch.take((fake_zoo, name)) for name in names]
    finally:
        prefetch.stop()
    by_worker = [i for i, row in enumerate(rows) if row is not None]
    assert all(rows[i]["name"] == names[i] and rows[i]["pid"] != os.getpid()
               for i in by_worker)  # fmt: skip
    # The worker started the first row before the caller came; then it took the last.
    assert by_worker[0] == 0 and len(by_worker) < len(names)
    assert by_worker[1:] == list(range(len(names) - len(by_worker) + 1, len(names)))


def test_stop_ends_the_worker_in_the_middle_of_a_row(fake_zoo):
    prefetch = zoo_rows.Prefetch([(fake_zoo, "sleeps")])
    time.sleep(1)
    start = time.monotonic()
    prefetch.stop()
    assert time.monotonic() - start < 60
    assert not prefetch._thread.is_alive()
