"""Shared pytest set-up: 8 CPU devices, set before anything imports jax; the module
verified after every step of shardc's pipelines (``SHARDC_VERIFY_STEPS``), so a
step that breaks the IR fails as an ``InternalError`` naming it. The zoos' rows are
measured in a worker process beside the other tests (``zoo_rows``)."""

import os

os.environ["XLA_FLAGS"] = (
    os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8"
).strip()
os.environ["SHARDC_VERIFY_STEPS"] = "1"

import zoo_rows  # noqa: E402 - after the environment its worker inherits


def pytest_collection_finish(session):
    """Start measuring the zoos' rows that the collected tests read, beside them
    (``SHARDC_ZOO_WORKER=0``: in the pytest process, one after another)."""
    if session.config.option.collectonly or os.environ.get("SHARDC_ZOO_WORKER") == "0":
        return
    rows = dict.fromkeys(key for item in session.items if (key := zoo_row(item)))
    if len(rows) > 1:
        zoo_rows.start(list(rows))


def zoo_row(item) -> tuple[str, str] | None:
    """(test module, program) of a test reading a zoo row (a module measuring rows with
    a ``measure`` for ``zoo_rows``, through its ``row`` fixture), else None."""
    params = getattr(getattr(item, "callspec", None), "params", {})
    if "row" not in params or not callable(getattr(item.module, "measure", None)):
        return None
    return item.path.stem, params["row"]


def pytest_sessionfinish(session):
    zoo_rows.stop()
