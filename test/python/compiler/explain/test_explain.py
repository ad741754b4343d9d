"""Lowered.explain(): rows, origins, filters, JSON, device grids; collectives vs XLA's HLO."""

import inspect
import json
import re
from collections import Counter
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

import shardc.compiler as sc
from shardc.compiler.explain import grid_of_array, visualize

ROOT = Path(__file__).resolve().parents[4]


def _mesh():
    return jax.make_mesh((2, 4), ("x", "y"), axis_types=(jax.sharding.AxisType.Auto,) * 2)


def _program(a, b):
    h = jnp.tanh(a @ b)
    h = jax.lax.with_sharding_constraint(h, NamedSharding(_mesh(), P(None, "y")))
    return h * 2.0


LINE = inspect.getsourcelines(_program)[1]  # the `def` line


@pytest.fixture(scope="module")
def small():
    mesh = _mesh()
    ins = (NamedSharding(mesh, P("x", "y")), NamedSharding(mesh, P("y", None)))
    return sc.jit(_program, in_shardings=ins).lower(jnp.ones((16, 32)), jnp.ones((32, 8)))


def test_rows_name_op_line_shard_and_origin(small):
    table = small.explain()
    dot = table.filter(op="dot_general").rows[0]
    assert dot.loc.endswith(f"test_explain.py:{LINE + 1}")
    assert dot.shape == (16, 8) and dot.dtype == "f32"
    assert dot.sharding == '[{"x"}, {"y"}]'
    assert dot.shard_shape == (8, 2) and dot.shard_bytes == 64
    assert dot.origins[0] == ("x", "arg 0 (a)")
    assert dot.collectives[0].kind == "all-reduce"
    assert dot.collectives[0].loc.endswith(f"test_explain.py:{LINE + 1}")
    # The constrained value's `y` comes from the user's with_sharding_constraint,
    # at its own line.
    mul = table.filter(op="multiply").rows[0]
    assert mul.origins[0][0] == "y"
    assert f"sharding_constraint @ test_explain.py:{LINE + 2}" in mul.origins[0][1]


def test_filters_text_and_json(small):
    table = small.explain()
    assert all(r.shard_bytes >= 256 for r in table.filter(min_bytes=256).rows)
    assert table.filter(source="no_such_file.py").rows == ()
    text = table.format_text(op="tanh")
    header, row = text.splitlines()[:2]
    assert header.startswith("value") and "stablehlo.tanh" in row
    assert header.index("sharding") == row.index("[{")  # aligned columns
    data = json.loads(table.to_json())
    # Lowered keeps its module from before propagation, so origins are recorded.
    assert data["origin_method"] == "recorded" and data["mesh"] == {"x": 2, "y": 4}
    assert {r["op"] for r in data["rows"]} >= {"argument", "stablehlo.dot_general"}


def test_unpropagated_module_gets_recorded_origins():
    # Before propagation, explain() propagates a copy itself and reads the
    # origins the engine recorded; Lowered.module (propagated) stays derived.
    from shardc.compiler.explain import explain

    mesh = _mesh()
    ins = (NamedSharding(mesh, P("x", "y")), NamedSharding(mesh, P("y", None)))
    lowered = sc.jit(_program, in_shardings=ins).lower(jnp.ones((16, 32)), jnp.ones((32, 8)),
                                                       propagate=False)
    table = explain(lowered.module)
    assert table.origin_method == "recorded"
    assert table.format_text().rstrip().endswith("origins recorded by propagation")
    assert table.filter(op="dot_general").rows[0].origins[0] == ("x", "arg 0 (a)")
    mul = table.filter(op="multiply").rows[0]
    assert mul.origins[0][0] == "y"
    assert f"sharding_constraint @ test_explain.py:{LINE + 2}" in mul.origins[0][1]


def test_grid_of_module_value_and_array(small):
    row = small.explain().row("%arg0")
    assert row.grid.splits == (2, 4)
    assert row.grid.devices[(1, 2)] == (6,)  # x=1, y=2 -> device 1*4+2
    mesh = _mesh()
    array = jax.device_put(np.zeros((16, 32), np.float32), NamedSharding(mesh, P("x", "y")))
    assert grid_of_array(array).devices == row.grid.devices
    text = visualize(array)
    assert text.count("+") == 3 * 5 and "6" in text.splitlines()[3]
    replicated = jax.device_put(np.zeros(4, np.float32), NamedSharding(mesh, P()))
    assert visualize(replicated).startswith("replicated")


def _hlo_collectives(hlo: str) -> Counter:
    """(kind, file line) of each collective in partitioned HLO, from its op metadata."""
    sections: dict[str, str] = {}
    current = None
    for line in hlo.splitlines():
        if line in ("FileNames", "FunctionNames", "FileLocations", "StackFrames"):
            current = line
        elif not line.strip():
            current = None
        elif current:
            sections[current] = sections.get(current, "") + line + "\n"
    files = dict(re.findall(r'(\d+) "(.*)"', sections["FileNames"]))
    locations = {k: (files[f], int(line)) for k, f, line in re.findall(
        r"(\d+) \{file_name_id=(\d+) function_name_id=\d+ line=(\d+)", sections["FileLocations"])}
    frames = dict(re.findall(r"(\d+) \{file_location_id=(\d+)", sections["StackFrames"]))
    found = Counter()
    for kind, frame in re.findall(
            r"= \S+ (all-gather|all-reduce|all-to-all|collective-permute|reduce-scatter)"
            r"(?:-start)?\(.*stack_frame_id=(\d+)", hlo):
        found[(kind, locations[frames[frame]])] += 1
    return found


def test_transformer_names_every_xla_collective():
    from bench.models import REGISTRY

    program = REGISTRY["transformer"]("small")
    lowered = sc.jit(program.fun, in_shardings=program.in_shardings,
                     out_shardings=program.out_shardings).lower(*program.args)
    explained = Counter()
    for row, need in lowered.explain().collectives():
        path, line = need.loc.rsplit(":", 1)
        explained[(need.kind, (path, int(line)))] += 1
    xla = _hlo_collectives(lowered.compile().as_text())
    assert xla and explained == xla
    assert {loc[0] for _, loc in xla} == {str(ROOT / "bench/models/transformer.py")}


def test_explain_leaves_the_kept_unpropagated_module_as_it_was():
    # Lowered keeps one module from before propagation, shared by a lowering's cache
    # hits: every explain() must find it unchanged.
    mesh = _mesh()
    ins = (NamedSharding(mesh, P("x", "y")), NamedSharding(mesh, P("y", None)))
    jitted = sc.jit(_program, in_shardings=ins)
    miss = jitted.lower(jnp.ones((16, 32)), jnp.ones((32, 8)))
    first = miss.explain().to_json()
    assert miss.explain().to_json() == first
    # (Counted from here: jits of _program made alike share their caches.)
    hits = jitted.cache_info().hits
    hit = jitted.lower(jnp.ones((16, 32)), jnp.ones((32, 8)))
    assert jitted.cache_info().hits == hits + 1 and hit.explain().to_json() == first
