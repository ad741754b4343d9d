"""JAX's multi-process tests (``tests/multiprocess/*.py``) through shardc, on one machine.

jax runs such a file with ``jax._src.test_multiprocess``'s launcher: it starts N
copies of the file, each joining jax's distributed runtime as one process, and
absl's test runner in each. Here each copy is a pytest process instead, so that
``jax_suite_plugin`` routes the file's jit calls (``JAX_SUITE_MODE``) and records
each test's outcome as for one-process files; this module, loaded as a pytest
plugin (``-p jax_suite_multiprocess``, configured by ``JAX_SUITE_PROCESS`` and
``JAX_SUITE_PROCESSES``), does what the launcher's flags do in a worker: join the
distributed runtime (CPU devices, gloo collectives) and set the flags the tests
read (``--num_processes``...). Every process runs the same tests in the same
order: jax's test class waits for all of them at a barrier around each test.

    python -m bench.jax_suite_multiprocess ../jax/tests/multiprocess/pjit_test.py \\
        --mode shardc [--processes 2] [--devices 4] [-- PYTEST_ARGS]

prints each test's outcome (a test passes when it passes in every process) and
writes each process's records (``jax_suite_plugin``'s JSON lines) beside its log
in ``--out`` (default: a temporary directory).
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import shutil
import socket
import subprocess
import sys
import tempfile

BENCH = pathlib.Path(__file__).resolve().parent


def pytest_configure(config) -> None:  # noqa: ARG001 - pytest's hook
    """Join jax's distributed runtime as ``JAX_SUITE_PROCESS`` of ``JAX_SUITE_PROCESSES``
    before the test file is imported, as the launcher's worker does."""
    if "JAX_SUITE_PROCESS" not in os.environ:
        return
    import absl.flags
    import jax

    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    from jax._src import test_multiprocess  # noqa: F401 - defines the launcher's flags

    count, index = int(os.environ["JAX_SUITE_PROCESSES"]), int(os.environ["JAX_SUITE_PROCESS"])
    address = f"localhost:{os.environ['JAX_SUITE_PORT']}"
    absl.flags.FLAGS(["worker", f"--num_processes={count}",
                      f"--multiprocess_test_worker_id={index}",
                      f"--multiprocess_test_controller_address={address}"], known_only=True)
    jax.distributed.initialize(address, num_processes=count, process_id=index,
                               heartbeat_timeout_seconds=60, initialization_timeout=120)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def run(test_file: pathlib.Path, mode: str, processes: int, devices: int,
        out: pathlib.Path, pytest_args: list[str], timeout: int
        ) -> dict[str, tuple[str, bool]]:
    """Run ``test_file`` in ``processes`` pytest processes; each test's outcome (failed
    where it failed in any process) and whether it called jit."""
    work = pathlib.Path(tempfile.mkdtemp(prefix="jax_suite_mp_"))
    shutil.copyfile(test_file, work / test_file.name)
    (work / "pytest.ini").write_text("[pytest]\n")
    port = str(_free_port())
    workers = []
    for index in range(processes):
        env = dict(os.environ, JAX_PLATFORMS="cpu", JAX_SUITE_MODE=mode,
                   XLA_FLAGS=f"--xla_force_host_platform_device_count={devices}",
                   JAX_SUITE_FILES=test_file.name, JAX_SUITE_PROCESS=str(index),
                   JAX_SUITE_PROCESSES=str(processes), JAX_SUITE_PORT=port,
                   JAX_SUITE_OUT=str(out / f"{mode}-{index}.jsonl"),
                   PYTHONPATH=os.pathsep.join([str(BENCH)] + (
                       [os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH") else [])))
        log = open(out / f"{mode}-{index}.log", "w")  # noqa: SIM115 - closed below
        workers.append((subprocess.Popen(
            [sys.executable, "-m", "pytest", "-q", "-p", "jax_suite_plugin", "-p",
             "jax_suite_multiprocess", "-p", "no:cacheprovider", test_file.name, *pytest_args],
            cwd=work, env=env, stdout=log, stderr=subprocess.STDOUT), log))
    try:
        for worker, log in workers:
            worker.wait(timeout=timeout)
            log.close()
    finally:
        for worker, _ in workers:
            if worker.poll() is None:
                worker.kill()
        shutil.rmtree(work, ignore_errors=True)
    outcomes: dict[str, tuple[str, bool]] = {}
    for index in range(processes):
        path = out / f"{mode}-{index}.jsonl"
        for line in path.read_text().splitlines() if path.exists() else ():
            record = json.loads(line)
            if record.get("event") != "end":
                continue
            seen, called = outcomes.get(record["nodeid"], (record["outcome"], False))
            outcomes[record["nodeid"]] = (seen if seen != "passed" else record["outcome"],
                                          called or bool(record.get("called_jit")))
    return outcomes


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("test_file", type=pathlib.Path)
    parser.add_argument("--mode", choices=("record", "shardc"), default="shardc")
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--devices", type=int, default=4, help="CPU devices per process")
    parser.add_argument("--out", type=pathlib.Path)
    parser.add_argument("--timeout", type=int, default=1800)
    parser.add_argument("pytest_args", nargs="*")
    args = parser.parse_args(argv)
    out = args.out or pathlib.Path(tempfile.mkdtemp(prefix="jax_suite_mp_out_"))
    out.mkdir(parents=True, exist_ok=True)
    outcomes = run(args.test_file.resolve(), args.mode, args.processes, args.devices, out,
                   args.pytest_args, args.timeout)
    for nodeid, (outcome, called) in outcomes.items():
        print(f"{outcome:8s} {'jit' if called else '   '} {nodeid}")
    counted = [outcome for outcome, called in outcomes.values() if called]
    print(f"{counted.count('passed')} of the {len(counted)} tests that called jit pass "
          f"({args.mode}); records in {out}")
    return 0 if outcomes else 1


if __name__ == "__main__":
    sys.exit(main())
