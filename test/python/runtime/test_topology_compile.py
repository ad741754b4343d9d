"""Compiling for a TPU topology's devices from a host without TPUs, as ``jax.jit``
does (``jax.experimental.topologies``): XLA:TPU's figures, no execution.

Needs libtpu (``pip install -e '.[tpu]'``); skipped where it is not installed.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import AxisType, Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from shardc.compiler import jit
from shardc.dialects.errors import NotExecutableError

pytest.importorskip("libtpu")


@pytest.fixture(scope="module")
def mesh():
    from jax.experimental import topologies

    devices = topologies.get_topology_desc(
        platform="tpu", topology_name="v5e:4x4", chip_config_name="default",
        chips_per_host_bounds=(2, 2, 1), num_slices=1).devices
    return Mesh(np.array(devices).reshape(4, 4), ("x", "y"), axis_types=(AxisType.Auto,) * 2)


def _f(x, w):
    return jnp.tanh(x @ w).sum()


ARGS = (jax.ShapeDtypeStruct((256, 512), jnp.bfloat16),
        jax.ShapeDtypeStruct((512, 512), jnp.bfloat16))


def test_compiles_for_topology_devices_as_jax_jit(mesh):
    specs = (P("x", "y"), P("y", None))
    lowered = jit(_f, in_shardings=specs, mesh=mesh).lower(*ARGS)
    assert lowered.target_platform == "tpu"
    compiled = lowered.compile()
    reference = jax.jit(_f, in_shardings=tuple(NamedSharding(mesh, s) for s in specs)).lower(
        *ARGS).compile()
    ours, theirs = compiled.memory_analysis(), reference.memory_analysis()
    assert (ours.argument_size_in_bytes, ours.output_size_in_bytes) == (
        theirs.argument_size_in_bytes, theirs.output_size_in_bytes)
    assert compiled.cost_analysis()["flops"] == reference.cost_analysis()["flops"]
    assert "T(8,128)" in compiled.as_text()  # XLA:TPU's tiled layouts
    assert compiled.input_shardings[0][0].spec == P("x", "y")
    with pytest.raises(NotExecutableError, match="no attribute 'local_devices'"):
        compiled(jnp.ones(ARGS[0].shape, ARGS[0].dtype), jnp.ones(ARGS[1].shape, ARGS[1].dtype))
    assert isinstance(NotExecutableError("x"), AttributeError)  # jax's class for this call
