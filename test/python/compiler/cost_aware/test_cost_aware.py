"""Cost-aware propagation: never more compiled collective bytes than
Shardy-compatible propagation or ``jax.jit``, strictly fewer on the conflict
programs, same numerics, no more memory; plus the strategy's plumbing."""

import functools

import jax
import jax.numpy as jnp
import pytest
from jax.sharding import NamedSharding, PartitionSpec

from bench import cost_aware as bench_cost_aware
from bench import e2e_measure
from bench.models import REGISTRY, REGRESSIONS
from shardc.compiler import jit

RELATIVE_TOLERANCE = 1e-5
# Programs where the cost-aware strategy must move strictly fewer bytes.
STRICTLY_BETTER = ("fsdp_train_step", "conflict_mlp", "conflict_attention",
                   "conflict_attention_seq", "conflict_mlp_wide", "conflict_mlp_deep")
# The e2e programs and the cost-aware regressions: shapes where a predicted saving once
# compiled to more bytes than Shardy (XLA computed a pinned dot in the returned layout).
PROGRAMS = {**REGISTRY, **REGRESSIONS}


@pytest.fixture(scope="module")
def rows() -> dict:
    return {name: bench_cost_aware.measure(PROGRAMS[name]("small"), repeats=1)
            for name in PROGRAMS}


@pytest.mark.parametrize("name", list(PROGRAMS))
def test_never_more_bytes_memory_or_error(rows, name):
    row = rows[name]
    assert row.error is None, row.error
    assert row.bytes["cost-aware"] <= row.bytes["shardy"], row
    assert row.bytes["cost-aware"] <= row.bytes["jax"], row
    assert row.memory["cost-aware"] <= row.memory["shardy"], row
    assert row.max_rel_error <= RELATIVE_TOLERANCE, row
    assert row.predicted["cost-aware"] <= row.predicted["shardy"]
    if row.predicted["cost-aware"] < row.predicted["shardy"]:
        # A predicted saving must survive compilation.
        assert row.bytes["cost-aware"] < row.bytes["shardy"], row


def test_regressions_compile_no_worse_than_shardy(rows):
    """The three shapes that once compiled worse than Shardy (docs/cost-aware.md)."""
    for name in REGRESSIONS:
        assert rows[name].bytes["cost-aware"] <= rows[name].bytes["shardy"], rows[name]


def test_ilp_optimum_not_above_greedy():
    """The exact optimum (an ILP) over the same choices is <= the greedy result."""
    from bench import cost_aware_ilp

    row = cost_aware_ilp.analyse(REGISTRY["conflict_mlp"]("small"))
    assert row.exhaustive is not None  # small enough to enumerate: ground truth
    assert row.ilp is not None and row.ilp <= row.greedy
    assert row.exhaustive <= row.greedy <= row.baseline
    assert row.ilp == row.exhaustive


def test_strictly_fewer_bytes_on_conflict_programs(rows):
    better = [n for n in STRICTLY_BETTER if rows[n].bytes["cost-aware"] < rows[n].bytes["shardy"]]
    assert better == list(STRICTLY_BETTER), {n: rows[n].bytes for n in STRICTLY_BETTER}


def test_evaluations_are_bounded(rows):
    import inspect

    from shardc.compiler.cost_aware.search import resolve

    bound = inspect.signature(resolve).parameters["max_evaluations"].default
    assert all(row.evaluations <= bound for row in rows.values())


def test_deterministic():
    program = REGISTRY["conflict_attention"]("small")
    texts = []
    for _ in range(2):
        lowered, _, _ = bench_cost_aware._lower(program, "cost-aware")
        texts.append((lowered.as_text(propagated=True),
                      lowered.cost_aware_resolution.format_text().split(",")[0]))
    assert texts[0] == texts[1]


def test_unknown_strategy_rejected():
    import shardc.compiler as sc

    with pytest.raises(Exception, match="propagation"):
        sc.jit(lambda x: x, propagation="greedy")


def test_lowered_carries_the_search_resolution():
    """``Lowered.cost_aware_resolution``: the search's ``Resolution`` for
    ``propagation="cost-aware"`` (the same one for a lowering served from the
    cache), None for the default route and without propagation; read-only."""
    from shardc.compiler.cost_aware import Resolution

    program = REGISTRY["conflict_mlp"]("small")
    aware, args, _ = e2e_measure.prepare(program, e2e_measure.COST_AWARE)
    lowered = aware.lower(*args)
    resolution = lowered.cost_aware_resolution
    assert isinstance(resolution, Resolution)
    # conflict_mlp is one of the programs where the search beats Shardy's choices.
    assert resolution.pins and resolution.final_bytes < resolution.baseline_bytes
    assert any(d.chosen for d in resolution.decisions), resolution.format_text()
    hits = aware.cache_info().hits
    again = aware.lower(*args)
    assert aware.cache_info().hits == hits + 1
    assert again.cost_aware_resolution is resolution
    with pytest.raises(AttributeError):
        lowered.cost_aware_resolution = None

    shardy, args, _ = e2e_measure.prepare(program, "shardc")
    assert shardy.lower(*args).cost_aware_resolution is None
    assert aware.lower(*args, propagate=False).cost_aware_resolution is None


def _found_case(index: int, strategy: str):
    """``(lowered, args)`` of case ``index`` of ``test_property_cost_aware.FOUND``."""
    import jax
    import numpy as np
    from jax.sharding import NamedSharding
    from test_property_cost_aware import FOUND, MESHES, mlp

    from shardc.compiler import jit

    case = FOUND[index]
    mesh = jax.make_mesh(case["mesh_shape"], MESHES[case["mesh_shape"]],
                         axis_types=(jax.sharding.AxisType.Auto,) * 2)
    batch, model, hidden = case["sizes"]
    shapes = ((batch, model), (model, hidden), (hidden, model))
    ins = tuple(NamedSharding(mesh, s) for s in case["specs"])
    rng = np.random.default_rng(index)
    args = [jax.device_put(rng.standard_normal(s).astype(np.float32), sharding)
            for s, sharding in zip(shapes, ins)]
    lowered = jit(mlp(case["residual"]), in_shardings=ins,
                  out_shardings=NamedSharding(mesh, case["out_spec"]),
                  propagation=strategy).lower(*args)
    return lowered, args


@pytest.mark.parametrize("found", [0, 1], ids=["reshard_keeps_producer", "one_shared_reshard"])
def test_found_cases_compile_as_predicted(found):
    """Two mispredictions ``test_property_cost_aware.py`` found, fixed at their cause (the
    compile-time fallback would otherwise hide them): the search's choice must compile to
    exactly its predicted bytes. ``compile()`` keeps it unless XLA compiles it in more
    memory than Shardy's choices (case 0: 1024 bytes against 576; the route promises
    neither more collective bytes nor more memory), and then runs Shardy's."""
    lowered, _ = _found_case(found, "cost-aware")
    resolution = lowered.cost_aware_resolution
    assert resolution.pins and resolution.final_bytes < resolution.baseline_bytes
    # The search's own choice, compiled without the comparison compile() makes.
    searched = lowered._compile(lowered.module, lowered.requested_devices, ())
    assert searched.collective_bytes() == resolution.final_bytes, resolution.format_text()
    shardy = _found_case(found, "shardy")[0].compile()
    compiled = lowered.compile()
    assert compiled.kept_shardy == (searched.memory_bytes() > shardy.memory_bytes())
    kept = shardy if compiled.kept_shardy else searched
    assert (compiled.collective_bytes(), compiled.memory_bytes()) == (
        kept.collective_bytes(), kept.memory_bytes())


def test_search_choices_reach_xla_as_constraints():
    """XLA's own Shardy import keeps only boundaries and constraints: the residual add
    the search keeps row-sharded reached XLA unconstrained, was re-propagated, and the
    choice compiled to 1216 bytes (Shardy's: 960). Constrained, it compiles to no more
    than predicted, without the fallback."""
    lowered, _ = _found_case(2, "cost-aware")
    resolution = lowered.cost_aware_resolution
    assert resolution.final_bytes < resolution.baseline_bytes
    assert "sdy.sharding_constraint" in lowered.as_text(propagated=True)
    compiled = lowered.compile()
    assert not compiled.kept_shardy
    assert compiled.collective_bytes() <= resolution.final_bytes, resolution.format_text()


def test_shardy_choices_exported_by_compile_not_lowering():
    """The safety net's export of Shardy's choices is compile()'s work: a lowering that
    is only read (as_text, the search's report) never exports them; the first compile
    exports them, once."""
    lowered, _ = _found_case(2, "cost-aware")
    resolution = lowered.cost_aware_resolution
    assert resolution.pins and resolution.shardy_export is not None
    lowered.as_text()
    resolution.format_text()
    assert not resolution.shardy_export.exported
    lowered.compile()
    assert resolution.shardy_export.exported
    exported = resolution.fallback
    assert exported is resolution.fallback
    assert exported.startswith(b"ML\xefR")  # MLIR bytecode


@pytest.mark.parametrize("found", [4, 5])
def test_compile_keeps_shardy_when_xla_partitions_the_choice_worse(found, monkeypatch):
    """The safety net: a predicted saving that XLA partitions into more bytes than
    Shardy's choices is compiled, compared with them and dropped. The cost model now
    prices these cases as XLA compiles them (case 5 was a saving of 12160 -> 6400 bytes
    predicted, 4352 compiled for Shardy's), so here it is made wrong on purpose: every
    copy's bytes priced negated, the search keeps the choice that moves the most."""
    import jax
    import numpy as np

    from shardc.compiler.cost_aware import pricing

    true_price = pricing.price

    def backwards(reader):
        collective_bytes, peak = true_price(reader)
        return -collective_bytes, peak

    monkeypatch.setattr(pricing, "price", backwards)
    lowered, args = _found_case(found, "cost-aware")
    resolution = lowered.cost_aware_resolution
    assert resolution.final_bytes < resolution.baseline_bytes and resolution.fallback
    compiled = lowered.compile()
    monkeypatch.undo()
    shardy, _ = _found_case(found, "shardy")
    reference = shardy.compile()
    assert compiled.kept_shardy and not reference.kept_shardy
    assert compiled.collective_bytes() == reference.collective_bytes()
    np.testing.assert_allclose(np.asarray(jax.block_until_ready(compiled(*args))),
                               np.asarray(reference(*args)), rtol=1e-5, atol=1e-6)


def test_results_left_open_keep_shardys_layout():
    # The search changes shardings inside the program, never the layout of what it
    # returns: a result left open comes back as jax.jit (= Shardy) returns it, also
    # when propagation leaves it replicated (no sharding written).
    import jax
    import jax.numpy as jnp
    from jax.sharding import AxisType, NamedSharding
    from jax.sharding import PartitionSpec as P

    from shardc.compiler import jit

    mesh = jax.make_mesh((2, 4), ("x", "y"), axis_types=(AxisType.Auto,) * 2)
    a = jax.device_put(jnp.ones((8, 4, 12)), NamedSharding(mesh, P("y", "x")))
    b = jax.device_put(jnp.ones((8, 4, 12)), NamedSharding(mesh, P("x", "y")))
    f = lambda a, b: jnp.minimum(a, b)  # noqa: E731
    expected = jax.jit(f)(a, b).sharding
    assert jit(f, mesh=mesh, propagation="cost-aware")(a, b).sharding == expected


def test_export_merges_constant_copies_as_shardy_does():
    """The import splits a constant per use and the search numbers every copy apart;
    the export still merges equal copies back, so with no conflict to resolve the
    cost-aware route writes the very module Shardy's route writes."""
    mesh = jax.make_mesh((8,), ("x",))
    sharding = NamedSharding(mesh, PartitionSpec("x"))

    def f(a):
        return jnp.tanh(a * 2.0) * 2.0 + jnp.sum(a * 2.0)

    x = jnp.ones((16, 4))
    shardy = jit(f, in_shardings=sharding).lower(x).as_text(propagated=True)
    cost_aware = jit(f, in_shardings=sharding,
                     propagation="cost-aware").lower(x).as_text(propagated=True)
    assert cost_aware == shardy


def test_host_callback_result_on_one_device_matches_jax_jit():
    """A ``pure_callback``'s result is maximal (on device 0): the cost model prices
    moving it, and the route returns jax.jit's values and output sharding."""
    mesh = jax.make_mesh((4, 2), ("data", "model"),
                         axis_types=(jax.sharding.AxisType.Auto,) * 2)  # fmt: skip
    x = jax.device_put(jnp.arange(64.0).reshape(16, 4), NamedSharding(mesh, PartitionSpec("data")))

    def step(x):
        h = x * 2
        return jax.pure_callback(lambda v: v + 1, jax.ShapeDtypeStruct(h.shape, h.dtype), h), h

    expected = jax.jit(step)(x)
    found = jit(step, propagation="cost-aware")(x)
    for got, want in zip(found, expected):
        assert (got == want).all()
        assert got.sharding.is_equivalent_to(want.sharding, got.ndim)


def test_alternatives_stay_on_the_mesh_of_the_op():
    """Libraries shard over meshes of their own axis names on the same devices (kauldron's
    ``FIRST_DIM``, a ``("devices",)`` mesh, next to the parameters' ``data`` x ``model``):
    a conflict's alternatives never pin a result with the axes of an operand on another
    mesh (which named ``"model"`` on the ``devices`` mesh and failed the search)."""
    import numpy as np
    from jax.sharding import Mesh

    mesh = jax.make_mesh((4, 2), ("data", "model"),
                         axis_types=(jax.sharding.AxisType.Auto,) * 2)  # fmt: skip
    first_dim = NamedSharding(Mesh(np.array(jax.devices()), ("devices",)), PartitionSpec("devices"))
    w = jax.device_put(jnp.ones((16, 16)), NamedSharding(mesh, PartitionSpec(None, "model")))
    x = jax.device_put(jnp.arange(128.0).reshape(8, 16) / 128, first_dim)

    def run(jit_function):
        @jit_function
        def step(w, c):
            return jnp.tanh(jax.lax.with_sharding_constraint(c, first_dim) @ w)

        @jit_function
        def loop(w, x):
            return jax.lax.while_loop(lambda c: c[0] < 3, lambda c: (c[0] + 1, step(w, c[1])),
                                      (0, x))[1]  # fmt: skip

        return loop(w, x)

    expected = run(jax.jit)
    found = run(functools.partial(jit, propagation="cost-aware"))
    np.testing.assert_allclose(np.asarray(found), np.asarray(expected), rtol=RELATIVE_TOLERANCE)
    assert found.sharding.is_equivalent_to(expected.sharding, found.ndim)
