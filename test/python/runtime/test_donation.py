"""Donation as jax.jit's: the same results, the same arguments deleted, the same buffers
aliased, and repeated donating calls in jax's C++ dispatch. A donated array passed on
afterwards is jax's "Array has been deleted" error, never a crash: not to the function
it was donated to, not to another one whose fast path is warm, not to jax.jit's (which
alone, for an array jax donated, kills the process).

The cases that could kill the process run in a subprocess, so that a regression fails
the test instead of taking pytest down.
"""

import subprocess
import sys
import textwrap

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P

from shardc.compiler import jit
from shardc.dialects.errors import DeletedArrayError

_SCRIPT = """
import os
os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=8"
os.environ["JAX_PLATFORMS"] = "cpu"
import jax, jax.numpy as jnp
from jax.sharding import NamedSharding, PartitionSpec as P
from shardc.compiler import jit
mesh = jax.make_mesh((8,), ("d",), axis_types=(jax.sharding.AxisType.Auto,))
def make():
    return jax.device_put(jnp.arange(16.0), NamedSharding(mesh, P("d")))
donor = {donor}
receiver = {receiver}
for _ in range(3):  # the fast paths are built and used (where they can be)
    donor(make()).block_until_ready()
    receiver(make()).block_until_ready()
donated = make()
donor(donated).block_until_ready()
try:
    receiver(donated)
except RuntimeError as error:
    print("raised", type(error).__name__, str(error).splitlines()[0])
"""


_DONOR = "jit(lambda x: x + 1, donate_argnums=0)"


@pytest.mark.parametrize(("donor", "receiver"), [
    (_DONOR, "jit(lambda x: x * 2)"),
    (_DONOR, "jax.jit(lambda x: x * 2)"),
    (_DONOR, "jit(lambda x: x * 2, donate_argnums=0)"),
    (_DONOR, "donor"),
    (f"{_DONOR}.lower(make()).compile()", "donor"),
    (f"{_DONOR}.lower(make()).compile()", "jax.jit(lambda x: x * 2)"),
])
def test_donated_sharded_array_passed_to_a_warm_function_raises(donor, receiver):
    script = textwrap.dedent(_SCRIPT.format(donor=donor, receiver=receiver))
    run = subprocess.run([sys.executable, "-P", "-c", script], capture_output=True, text=True,
                         timeout=240)
    assert run.returncode == 0, run.stderr[-2000:]
    assert "raised" in run.stdout
    assert "Array has been deleted with shape=float32[16" in run.stdout


def mesh_8():
    return jax.make_mesh((8,), ("d",), axis_types=(AxisType.Auto,))


def test_donated_array_is_deleted_and_passing_it_again_is_jax_error():
    # On one device a stale buffer is XLA's ValueError, not a crash: in process.
    sharding = jax.sharding.SingleDeviceSharding(jax.devices()[0])
    donor = jit(lambda x: x + 1, donate_argnums=0)
    receiver = jit(lambda x: x * 2)
    warm = jax.device_put(jnp.arange(16.0), sharding)
    np.testing.assert_array_equal(receiver(warm), jax.jit(lambda x: x * 2)(warm))
    receiver(warm).block_until_ready()
    donated = jax.device_put(jnp.arange(16.0), sharding)
    out = donor(donated).block_until_ready()
    np.testing.assert_array_equal(out, np.arange(16.0) + 1)
    assert donated.is_deleted()
    with pytest.raises(RuntimeError, match=r"Array has been deleted with shape=float32\[16") \
            as ours:
        receiver(donated)
    assert isinstance(ours.value, DeletedArrayError)
    with pytest.raises(RuntimeError, match="Array has been deleted"):
        donor(donated)
    # The receiver's fast path still serves live arrays.
    np.testing.assert_array_equal(receiver(warm), np.arange(16.0) * 2)


def test_an_argument_copied_to_be_placed_is_not_deleted():
    # Host data and uncommitted arrays are placed first: the copy is donated, the
    # caller's array stays usable (as with jax.jit).
    sharding = NamedSharding(mesh_8(), P("d"))
    donor = jit(lambda x: x + 1, in_shardings=sharding, donate_argnums=0)
    uncommitted = jnp.arange(16.0)
    donor(uncommitted).block_until_ready()
    assert not uncommitted.is_deleted()
    np.testing.assert_array_equal(uncommitted, np.arange(16.0))


def _placed(sharding):
    return (jax.device_put(np.arange(16.0, dtype=np.float32), sharding),
            jax.device_put(np.ones(16, np.float32), sharding))


@pytest.mark.parametrize("donation", [{"donate_argnums": 0}, {"donate_argnames": "b"},
                                      {"donate_argnums": (0, 1)}])
@pytest.mark.parametrize("stage", ["jit", "compiled"])
def test_donating_calls_match_jax_jit_and_run_in_its_dispatch(donation, stage, monkeypatch):
    from shardc.runtime.compiled import Compiled

    python_calls = []
    python_call = Compiled._call
    monkeypatch.setattr(Compiled, "_call",
                        lambda self, *a: python_calls.append(self) or python_call(self, *a))
    sharding = NamedSharding(mesh_8(), P("d"))
    f = lambda a, b: (a * 2 + b, b - 1)  # noqa: E731
    ours, theirs = jit(f, **donation), jax.jit(f, **donation)
    if stage == "compiled":
        ours, theirs = (fn.lower(*_placed(sharding)).compile() for fn in (ours, theirs))
    for call in range(3):
        mine, jaxs = _placed(sharding), _placed(sharding)
        got, want = ours(*mine), theirs(*jaxs)
        for g, w in zip(got, want):
            np.testing.assert_array_equal(g, w)
            assert g.sharding == w.sharding
        assert [a.is_deleted() for a in mine] == [a.is_deleted() for a in jaxs]
        assert any(a.is_deleted() for a in mine)
    # Only the first call of the signature ran in Python.
    assert len(python_calls) == 1
    # The donated buffers are aliased to results as jax.jit aliases them.
    if stage == "jit":
        ours, theirs = (fn.lower(*_placed(sharding)).compile() for fn in (ours, theirs))
    assert ours.memory_analysis().alias_size_in_bytes == \
        theirs.memory_analysis().alias_size_in_bytes > 0
    assert [i.donated for i in jax.tree.leaves(ours.args_info)] == \
        [i.donated for i in jax.tree.leaves(theirs.args_info)]


def test_donated_array_after_a_fast_path_call_is_jax_error():
    # In process: one device (a stale buffer there is XLA's ValueError, not a crash).
    sharding = jax.sharding.SingleDeviceSharding(jax.devices()[0])
    donor = jit(lambda x: x + 1, donate_argnums=0)
    for _ in range(3):
        donor(jax.device_put(jnp.arange(16.0), sharding)).block_until_ready()
    donated = jax.device_put(jnp.arange(16.0), sharding)
    np.testing.assert_array_equal(donor(donated), np.arange(16.0) + 1)
    assert donor._cache_size() == 1
    with pytest.raises(RuntimeError, match=r"Array has been deleted with shape=float32\[16"):
        donor(donated)
    with pytest.raises(RuntimeError, match=r"Array has been deleted with shape=float32\[16"):
        jnp.sum(donated)
