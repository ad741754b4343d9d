"""Two processes on jax's distributed runtime run shardc programs like one process.

Each test starts two workers (``multiprocess/worker.py``) on 127.0.0.1 with a
free port, 4 CPU devices each and gloo collectives. Every wait is bounded, and
the process group is killed on the way out, so a broken run fails instead of
hanging CI.
"""

import os
import pathlib
import signal
import socket
import subprocess
import sys
import time

import numpy as np
import pytest
from multiprocess import programs

TEST_PYTHON = pathlib.Path(__file__).resolve().parents[1]
ROOT = TEST_PYTHON.parents[1]

RUN_TIMEOUT_S = 150


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="module")
def expected_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("mp") / "expected.npz"
    np.savez(path, **programs.reference_outputs(programs.make_mesh()))
    return path


def start_workers(expected_file, mode):
    port = str(free_port())
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    # The worker is the module multiprocess.worker; its programs import the zoo's `bench`.
    env["PYTHONPATH"] = os.pathsep.join(
        [str(ROOT), str(TEST_PYTHON)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    return [
        subprocess.Popen(
            [sys.executable, "-P", "-m", "multiprocess.worker", str(i), port, str(expected_file),
             mode],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True, env=env, start_new_session=True,
        )
        for i in range(2)
    ]


def stop(workers):
    for worker in workers:
        if worker.poll() is None:
            os.killpg(worker.pid, signal.SIGKILL)
            worker.wait()


def test_programs_match_single_process_jax_jit(expected_file):
    workers = start_workers(expected_file, "all")
    try:
        outputs = [w.communicate(timeout=RUN_TIMEOUT_S) for w in workers]
    finally:
        stop(workers)
    for index, (worker, (out, err)) in enumerate(zip(workers, outputs)):
        assert worker.returncode == 0, f"process {index} failed:\n{out}\n{err[-4000:]}"
        for program in programs.PROGRAMS:
            assert f"OK {program.name}" in out, out
        assert f"OK {programs.ZOO_PROGRAM}" in out, out
        assert "OK host_local_round_trip" in out
        assert "OK numpy_input_sharding" in out
    # Outputs sharded over x span both processes: neither holds all of them.
    assert "OK sharded_across_processes fully_addressable=[False]" in outputs[0][0]
    assert "OK replicated_output fully_addressable=[False, False]" in outputs[0][0]


def test_survivor_exits_when_its_peer_dies(expected_file):
    workers = start_workers(expected_file, "die")
    try:
        for worker in workers:
            line = ""
            deadline = time.monotonic() + RUN_TIMEOUT_S
            while "READY" not in line and time.monotonic() < deadline:
                line = worker.stdout.readline()
                assert line or worker.poll() is None, worker.stderr.read()[-4000:]
        os.killpg(workers[1].pid, signal.SIGKILL)
        workers[0].stdin.write("go\n")
        workers[0].stdin.flush()
        start = time.monotonic()
        try:
            workers[0].wait(timeout=90)
        except subprocess.TimeoutExpired:
            pytest.fail("the surviving process hung for 90 s after its peer died")
        assert workers[0].returncode != 0
        assert time.monotonic() - start < 90
        assert "UNEXPECTED" not in workers[0].stdout.read()
    finally:
        stop(workers)


def test_host_local_shape_that_cannot_be_global():
    import jax
    from jax.sharding import Mesh
    from jax.sharding import PartitionSpec as P

    from shardc.dialects.errors import IndivisibleDimensionError
    from shardc.runtime import host_local_to_global

    mesh = Mesh(np.array(jax.devices()).reshape(8), ("x",))
    with pytest.raises(IndivisibleDimensionError, match=r"dimension 0 should be divisible by 8, "
                                                        r"but it is equal to 4"):
        host_local_to_global(np.ones((4, 2), np.float32), mesh, P("x"))
    array = host_local_to_global(np.ones((8, 2), np.float32), mesh, P("x"))
    assert array.shape == (8, 2)
