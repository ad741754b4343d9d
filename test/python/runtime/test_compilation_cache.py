"""shardc's executables go through jax's persistent compilation cache, as jax.jit's do:
written on a miss, read back (not compiled again) on a hit, with jax's events."""

import collections

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax._src import compilation_cache, config, monitoring
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P

from shardc.compiler import jit

HITS, REQUESTS = "/jax/compilation_cache/cache_hits", "/jax/compilation_cache/compile_requests_use_cache"


@pytest.fixture
def events():
    counts = collections.Counter()
    listener = lambda event, **_: counts.update([event])  # noqa: E731
    monitoring.register_event_listener(listener)
    yield counts
    monitoring.unregister_event_listener(listener)


@pytest.fixture
def cache_dir(tmp_path):
    compilation_cache.reset_cache()
    with config.enable_compilation_cache(True), \
            config.compilation_cache_dir(str(tmp_path)), \
            config.persistent_cache_min_compile_time_secs(0), \
            config.persistent_cache_min_entry_size_bytes(0):
        yield tmp_path
    compilation_cache.reset_cache()


def _entries(path):
    return sorted(p.name for p in path.iterdir() if not p.name.endswith("-atime"))


def test_a_miss_writes_an_entry_and_a_new_jit_reads_it(cache_dir, events):
    mesh = jax.make_mesh((4, 2), ("x", "y"), axis_types=(AxisType.Auto,) * 2)
    x = jax.device_put(np.arange(64, dtype=np.float32).reshape(8, 8),
                       NamedSharding(mesh, P("x", "y")))
    def program():  # a new function each time: nothing of an earlier jit to reuse
        return lambda a: jnp.sin(a) @ a.T

    expected = jax.jit(program())(x)
    jax_entries = _entries(cache_dir)
    assert len(jax_entries) == 1

    out = jit(program())(x)
    entries = _entries(cache_dir)
    assert len(entries) == 2  # shardc's module is its own, with its own key
    assert events[HITS] == 0

    again = jit(program())(x)  # compiled by none: read back
    assert _entries(cache_dir) == entries
    assert events[HITS] == 1 and events[REQUESTS] == 3
    for result in (out, again):
        np.testing.assert_allclose(np.asarray(result), np.asarray(expected), rtol=1e-5)
        assert result.sharding.is_equivalent_to(expected.sharding, 2)


def test_disabled_cache_writes_nothing(tmp_path, events):
    compilation_cache.reset_cache()
    with config.enable_compilation_cache(False), config.compilation_cache_dir(str(tmp_path)):
        np.testing.assert_array_equal(np.asarray(jit(lambda a: a + 1)(np.int32(1))), 2)
    compilation_cache.reset_cache()
    assert _entries(tmp_path) == []
    assert events[REQUESTS] == 0
