"""Memory kinds in jit's shardings (``NamedSharding(..., memory_kind=...)``), compared
with jax.jit: values, the memories results come back in, compiled shardings."""

import jax
import numpy as np
import pytest
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P

from shardc.compiler import jit


@pytest.fixture
def mesh():
    return jax.make_mesh((2, 2), ("x", "y"), axis_types=(AxisType.Auto,) * 2)


def kinds(tree):
    return jax.tree.map(lambda s: s.memory_kind, tree)


@pytest.mark.parametrize("options", [
    {"in_shardings": "pinned_host"},
    {"in_shardings": "pinned_host", "out_shardings": "device"},
    {"out_shardings": ("pinned_host", "device")},
    {"out_shardings": ("unpinned_host", "pinned_host")},
], ids=lambda options: "-".join(f"{k}={v}" for k, v in options.items()))
def test_memory_kinds_as_jax_jit(mesh, options):
    x = np.arange(256, dtype=np.float32).reshape(16, 16)

    def on(kind):
        return NamedSharding(mesh, P("x", "y"), memory_kind=kind)

    given = {name: (tuple(map(on, kind)) if isinstance(kind, tuple) else on(kind))
             for name, kind in options.items()}
    arg = jax.device_put(x, given.get("in_shardings", on("device")))
    pair = isinstance(options.get("out_shardings"), tuple)

    def fun(v):
        return (v * 2, v + 1) if pair else v * 2

    ours, theirs = jit(fun, **given), jax.jit(fun, **given)
    out, expected = ours(arg), theirs(arg)
    for o, e in zip(jax.tree.leaves(out), jax.tree.leaves(expected)):
        np.testing.assert_array_equal(o, e)
        assert o.sharding == e.sharding
    compiled, reference = ours.lower(arg).compile(), theirs.lower(arg).compile()
    assert kinds(compiled.output_shardings) == kinds(reference.output_shardings)
    assert kinds(compiled.input_shardings) == kinds(reference.input_shardings)
    text = ours.lower(arg).as_text()
    assert 'mhlo.memory_kind = "pinned_host"' in text
    # Results are placed in their memories where their shardings are given.
    assert ("annotate_device_placement" in text) == ("out_shardings" in options)


def test_device_memory_only_leaves_the_module_as_jax_jit_does(mesh):
    sharding = NamedSharding(mesh, P("x"), memory_kind="device")
    text = jit(lambda v: v * 2, out_shardings=sharding).lower(np.ones((8, 4))).as_text()
    assert "memory_kind" not in text and "annotate_device_placement" not in text
