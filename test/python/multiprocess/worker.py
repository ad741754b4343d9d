"""One process of a two-process shardc run (started by test_multiprocess.py).

    python -m multiprocess.worker PROCESS_ID PORT EXPECTED.npz MODE

(the repository root, for ``bench``, and test/python on ``PYTHONPATH``).

Joins jax's distributed runtime (4 CPU devices per process, gloo
collectives), runs every program of ``programs.py`` (the zoo's language-model
train step included) through shardc on the global 4x2 mesh, and checks each addressable shard of each output against
the single-process ``jax.jit`` result in EXPECTED.npz. Prints ``OK <name>``
per program. MODE ``die`` stops after the first program, waiting for the
parent to kill one process, then runs a collective program: the survivor
must notice the dead peer and exit non-zero.
"""

import os
import sys

os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=4"

import jax  # noqa: E402

jax.config.update("jax_cpu_collectives_implementation", "gloo")

import numpy as np  # noqa: E402
from multiprocess import programs  # noqa: E402

from shardc.compiler import jit  # noqa: E402
from shardc.runtime import global_to_host_local, host_local_to_global  # noqa: E402


def check(name, outputs, expected):
    for index, out in enumerate(jax.tree.leaves(outputs)):
        reference = expected[f"{name}/{index}"]
        assert out.shape == reference.shape, (name, out.shape, reference.shape)
        for shard in out.addressable_shards:
            np.testing.assert_allclose(
                np.asarray(shard.data), reference[shard.index], rtol=1e-5, atol=1e-5
            )
    print(f"OK {name} fully_addressable={[o.is_fully_addressable for o in jax.tree.leaves(outputs)]}",
          flush=True)


def main() -> None:
    process_id, port, expected_path, mode = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
    jax.distributed.initialize(
        f"127.0.0.1:{port}", num_processes=2, process_id=process_id,
        initialization_timeout=60, heartbeat_timeout_seconds=10,
    )
    mesh = programs.make_mesh()
    expected = np.load(expected_path)
    for program in programs.PROGRAMS:
        args = programs.global_arguments(program, mesh)
        fn = jit(program.fun, program.in_shardings, program.out_shardings, mesh=mesh)
        outputs = jax.block_until_ready(fn(*args))
        check(program.name, outputs, expected)
        if mode == "die":
            print("READY", flush=True)
            sys.stdin.readline()  # the parent kills the peer, then writes a line
            cross = programs.PROGRAMS[1]
            jax.block_until_ready(jit(cross.fun, cross.in_shardings, mesh=mesh)(
                *programs.global_arguments(cross, mesh)))
            print("UNEXPECTED: finished without the peer", flush=True)
            return

    check(programs.ZOO_PROGRAM, programs.run_zoo_program(jit), expected)

    # The host-local helpers: this process's rows in, the global array out, and back.
    spec = jax.sharding.PartitionSpec("x", "y")
    full = programs.data((16, 8), seed=7)
    rows = full[process_id * 8:(process_id + 1) * 8]
    as_global = host_local_to_global(rows, mesh, spec)
    assert as_global.shape == (16, 8) and not as_global.is_fully_addressable
    total = jax.block_until_ready(jit(lambda a: a.sum(), mesh=mesh)(as_global))
    np.testing.assert_allclose(np.asarray(total), full.sum(), rtol=1e-5)
    np.testing.assert_array_equal(np.asarray(global_to_host_local(as_global, mesh, spec)), rows)
    print("OK host_local_round_trip", flush=True)

    # A numpy argument given a sharding that splits it: each process's numpy data is
    # its own, so jax.jit refuses it (a replicated one is fine), and so does shardc.
    host = np.arange(16, dtype=np.float32)
    errors = []
    for wrap in (jax.jit, jit):
        np.testing.assert_array_equal(
            np.asarray(wrap(lambda a: a, in_shardings=jax.NamedSharding(
                mesh, jax.P()))(host).addressable_data(0)), host)
        try:
            wrap(lambda a: a, in_shardings=jax.NamedSharding(mesh, jax.P("x")))(host)
        except ValueError as error:
            errors.append(str(error))
    assert len(errors) == 2 and errors[1].startswith(errors[0]), errors
    print("OK numpy_input_sharding", flush=True)
    jax.distributed.shutdown()


if __name__ == "__main__":
    main()
