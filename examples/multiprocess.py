"""Run one shardc program across two processes with jax's distributed runtime.

Start both processes (each gets 4 CPU devices; together they form a 4x2 mesh):

    python examples/multiprocess.py --process-id 0 --port 12355 &
    python examples/multiprocess.py --process-id 1 --port 12355

Each process feeds its own rows of the input (host-local data), shardc
compiles the same program for all 8 devices, and each process prints the
shards of the result it holds plus the global sum, which needs a collective
across the processes.
"""

import argparse
import os

os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=4"

import jax  # noqa: E402

jax.config.update("jax_cpu_collectives_implementation", "gloo")

import numpy as np  # noqa: E402
from jax.sharding import AxisType  # noqa: E402
from jax.sharding import PartitionSpec as P  # noqa: E402

from shardc.compiler import jit  # noqa: E402
from shardc.runtime import host_local_to_global  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--process-id", type=int, required=True)
    parser.add_argument("--port", type=int, default=12355)
    options = parser.parse_args()
    jax.distributed.initialize(f"127.0.0.1:{options.port}", num_processes=2,
                               process_id=options.process_id, heartbeat_timeout_seconds=20)
    me = jax.process_index()
    mesh = jax.make_mesh((4, 2), ("x", "y"), axis_types=(AxisType.Auto,) * 2)

    full = np.arange(16 * 8, dtype=np.float32).reshape(16, 8)
    my_rows = full[me * 8:(me + 1) * 8]  # this process's devices hold rows x=2*me, 2*me+1
    x = host_local_to_global(my_rows, mesh, P("x", "y"))

    step = jit(lambda x: (jax.numpy.tanh(x / 100.0), x.sum()), out_shardings=(P("x", "y"), P()),
               mesh=mesh)
    scaled, total = jax.block_until_ready(step(x))
    for shard in scaled.addressable_shards:
        print(f"[process {me}] device {shard.device.id} holds rows/cols {shard.index}")
    print(f"[process {me}] global sum = {float(total.addressable_data(0))} "
          f"(expected {full.sum()}), result fully addressable: {scaled.is_fully_addressable}")
    jax.distributed.shutdown()


if __name__ == "__main__":
    main()
