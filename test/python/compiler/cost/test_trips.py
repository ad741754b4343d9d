"""Loop bodies in ``comm_report``: static trip counts, and per-step totals against XLA's HLO."""

import re

import jax
import jax.numpy as jnp
import pytest
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from shardc.compiler import jit
from shardc.compiler.cost.trips import trip_count
from shardc.compiler.propagation.graph import PropagationGraph
from shardc.runtime.collectives import find_collectives


def _loops(f, *args):
    module = jit(f).lower(*args).module
    graph = PropagationGraph(module.operation)
    return [trip_count(graph, op) for op, name in enumerate(graph.op_name)
            if name == "stablehlo.while"]


def test_static_trip_counts_of_scan_and_fori_loop():
    def f(x, ws):
        x, _ = jax.lax.scan(lambda c, w: (jnp.tanh(c @ w), None), x, ws)
        x = jax.lax.fori_loop(2, 7, lambda i, c: c * 2, x)  # jax counts from 0 to 5
        x = jax.lax.fori_loop(0, 3, lambda i, c: c + i, x, unroll=False)
        return jax.lax.scan(lambda c, w: (c @ w, None), x, ws, reverse=True)[0]

    assert _loops(f, jnp.ones((4, 8)), jnp.ones((5, 8, 8))) == [5, 5, 3, 5]


def test_dynamic_trip_count_is_unknown_and_noted():
    def f(x, n):
        return jax.lax.fori_loop(0, n, lambda i, c: jnp.sin(c), x)

    assert _loops(f, jnp.ones(4), 3) == [None]
    mesh = jax.make_mesh((8,), ("d",), axis_types=(jax.sharding.AxisType.Auto,))
    x = NamedSharding(mesh, P("d"))
    report = jit(lambda x, n: jax.lax.while_loop(
        lambda c: c[1] < n, lambda c: (c[0] @ c[0].T @ c[0], c[1] + 1), (x, 0))[0],
        in_shardings=(x, None)).lower(jnp.ones((8, 8)), 3).comm_report()
    assert any("without a static trip count" in note for note in report.notes)
    assert report.step_totals() == report.totals()


def _xla_step_totals(hlo: str) -> dict[str, int]:
    """Bytes per kind of XLA's collectives per step: each while body's counted
    ``known_trip_count`` times (its backend config), nested loops multiplied."""
    computations, name, entry = {}, None, None
    for line in hlo.splitlines():
        head = re.match(r"^(ENTRY )?%?([\w.\-]+) .*\{\s*$", line)
        if head:
            name = head.group(2)
            computations[name] = []
            entry = name if head.group(1) else entry
        elif name:
            computations[name].append(line)
    runs, todo = {entry: 1}, [entry]
    while todo:
        computation = todo.pop()
        for line in computations[computation]:
            if " while(" in line:
                body = re.search(r"body=%?([\w.\-]+)", line).group(1)
                trips = re.search(r'"known_trip_count":\{"n":"(\d+)"', line)
                runs[body] = runs[computation] * int(trips.group(1))
                todo.append(body)
    totals: dict[str, int] = {}
    for computation, lines in computations.items():
        for c in find_collectives("\n".join(lines)):
            totals[c.kind] = totals.get(c.kind, 0) + runs.get(computation, 1) * c.bytes_per_device
    return totals


LAYERS = 3


def _train_step(variant):
    def loss(ws, x):
        def layer(x, w):
            return jnp.tanh(jnp.tanh(x @ w[0]) @ w[1])

        if variant == "unrolled":
            for w in ws:
                x = layer(x, w)
        else:
            x, _ = jax.lax.scan(lambda x, w: (layer(x, w), None), x, ws)
        return jnp.sum(x ** 2)

    def step(ws, x):
        value, grads = jax.value_and_grad(loss)(ws, x)
        return jax.tree.map(lambda w, g: w - 0.1 * g, ws, grads), value

    return step


@pytest.fixture(scope="module")
def reports():
    mesh = jax.make_mesh((2, 4), ("data", "model"), axis_types=(jax.sharding.AxisType.Auto,) * 2)
    col, row = NamedSharding(mesh, P(None, "model")), NamedSharding(mesh, P("model", None))
    x = jax.device_put(jnp.ones((16, 32)), NamedSharding(mesh, P("data", None)))
    stacked = (NamedSharding(mesh, P(None, None, "model")),
               NamedSharding(mesh, P(None, "model", None)))
    setups = {
        "unrolled": ([(jnp.ones((32, 64)), jnp.ones((64, 32)))] * LAYERS, [(col, row)] * LAYERS),
        "scan": ((jnp.ones((LAYERS, 32, 64)), jnp.ones((LAYERS, 64, 32))), stacked),
    }
    out = {}
    for variant, (ws, shardings) in setups.items():
        lowered = jit(_train_step(variant), in_shardings=(shardings, x.sharding)).lower(ws, x)
        out[variant] = (lowered.comm_report(), _xla_step_totals(lowered.compile().as_text()))
    return out


@pytest.mark.parametrize("variant", ["unrolled", "scan"])
def test_step_totals_match_xla_per_step(reports, variant):
    # Bytes, not counts: XLA's combiner merges all-reduces into fewer instructions.
    report, xla = reports[variant]
    mine = {k: t.bytes_per_device for k, t in report.step_totals().items() if t.count}
    assert mine == xla


def test_scan_counts_its_body_once_per_layer(reports):
    scan, _ = reports["scan"]
    body = scan.totals()["all-reduce"].bytes_per_device
    step = scan.step_totals()["all-reduce"].bytes_per_device
    looped = [e for e in scan.entries if e.runs == LAYERS]
    assert looped and step == body + (LAYERS - 1) * sum(e.bytes_per_device for e in looped)
    assert "runs x3" in scan.format_text() and '"step_totals"' in scan.to_json()
    # The scanned step moves what the unrolled one does, up to what XLA itself
    # does differently for the loop (the same gap in its compiled HLO).
    unrolled, xla_unrolled = reports["unrolled"]
    _, xla_scan = reports["scan"]
    gap = (scan.step_totals()["all-reduce"].bytes_per_device
           - unrolled.step_totals()["all-reduce"].bytes_per_device)
    assert gap == xla_scan["all-reduce"] - xla_unrolled["all-reduce"]
    assert abs(gap) < 0.1 * xla_unrolled["all-reduce"]
