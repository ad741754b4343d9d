"""The zoo (``bench/zoo``) at its small sizes: both of shardc's routes against ``jax.jit``.

Each zoo program is a JAX program written the way users write them (flax.linen
and flax.nnx train steps, optax, donation, scans, custom_vjp, MoE, shard_map,
typed PRNG keys...). For shardc's default route (``propagation="shardy"``) and
for ``propagation="cost-aware"``, every program must compile and run; its
results must equal jax.jit's, bit for bit where jax.jit's own results are
bitwise equal run to run (else to ``RELATIVE_TOLERANCE``); its output
shardings must be jax.jit's; and it must move no more collective bytes per
device than jax.jit. The cost-aware route must also never move more bytes or
use more memory than shardc's default (Shardy's choices). Where the cost-aware
route compiles a partition of its own, its results cannot be jax.jit's bits
(partial sums add up over other device groups): they must then be within
``REPARTITIONED_TOLERANCE``. A failure here is a shardc bug to fix, never a
program to change or a threshold to loosen. jax.jit itself must run every
program (it is measured even where shardc fails). Each program is compiled once
per route (``measure_program``, cached for the session; measured in a worker
process while the other tests run, ``zoo_rows``); a failing route fails its tests
with its error.
"""

import functools

import pytest
import zoo_rows

from bench.zoo import REGISTRY, report

RELATIVE_TOLERANCE = 1e-6
# float32 reassociation of partial sums all-reduced over other device groups: what
# separates jax.jit's own results for lm_linen (activations constrained by hand) and
# lm_linen_unconstrained, the same function sharded two ways (1.1e-6 at the small
# size); bench/cost_aware's programs differ from jax.jit by up to 1.5e-6 for the same
# reason (test/python/compiler/cost_aware/test_cost_aware.py allows 1e-5 there too).
REPARTITIONED_TOLERANCE = 1e-5
ROUTES = ("shardc", "cost-aware")
PROGRAMS = (
    "lm_linen", "lm_linen_unconstrained", "lm_nnx", "lm_scan_layers", "grad_loops",
    "grad_loops_unrolled", "moe", "cnn_batchnorm", "vit_bf16", "decode_kv_cache",
    "pipeline_shard_map", "embedding_heads", "dropout_cond",
)  # fmt: skip


def measure(name: str) -> dict:
    """One program measured on jax.jit and both shardc routes (never raises: a failure
    is in the row, and the tests below fail on it)."""
    return report.measure(REGISTRY[name]("small"))


@functools.cache
def measure_program(name: str) -> dict:
    """``measure(name)``, once per session: by the worker measuring the rows beside the
    other tests where it has (``zoo_rows``), else here."""
    return zoo_rows.take(__file__, name, measure)


@pytest.fixture(scope="module", params=list(REGISTRY))
def row(request) -> dict:
    return measure_program(request.param)


def repartitioned(row: dict) -> bool:
    """Whether the cost-aware route runs a partition of its own (not Shardy's choices)."""
    search = row["cost_aware_search"]
    return bool(search.get("resolved")) and not search.get("kept_shardy")


def measured(row: dict, route: str) -> dict:
    """``row``, after failing the test if ``route`` did not compile and run (shardc's
    default and the cost-aware route are built and run apart)."""
    if route == "cost-aware" and row["cost_aware_error"]:
        pytest.fail(
            f"{row['name']} (cost-aware): {row['cost_aware_error']}\n{row['cost_aware_traceback']}",
            pytrace=False,
        )
    if route == "shardc" and row["error"] or route not in row["collective_bytes"]:
        pytest.fail(f"{row['name']}: {row['error']}\n{row['traceback']}", pytrace=False)
    return row


@pytest.mark.parametrize("route", ROUTES)
def test_compiles_and_runs(row, route):
    assert measured(row, route)["collective_bytes"].get(route) is not None


def test_jax_jit_runs_and_its_determinism_is_known(row):
    """jax.jit itself (measured even where shardc fails) runs the program twice."""
    assert not row["jax_error"], f"{row['name']}: jax.jit fails: {row['jax_error']}"
    assert row["jax_deterministic"] in (True, False)


@pytest.mark.parametrize("route", ROUTES)
def test_results_equal_jax_jit(row, route):
    row = measured(row, route)
    if route == "cost-aware" and repartitioned(row):
        error = row["cost_aware_max_rel_error"]
        assert error <= REPARTITIONED_TOLERANCE, (
            f"{row['name']} ({route}, repartitioned): max relative error {error}")
        return
    if row["jax_deterministic"]:
        assert row["bitwise_equal"][route], (
            f"{row['name']} ({route}): jax.jit is bitwise deterministic but this route's "
            f"results differ from its bits (max relative error "
            f"{row['max_rel_error'] if route == 'shardc' else row['cost_aware_max_rel_error']:.3g})"
        )
    else:
        error = row["max_rel_error"] if route == "shardc" else row["cost_aware_max_rel_error"]
        assert error <= RELATIVE_TOLERANCE, f"{row['name']} ({route}): max relative error {error}"



@pytest.mark.parametrize("route", ROUTES)
def test_output_shardings_equal_jax_jit(row, route):
    row = measured(row, route)
    mismatched = row["mismatched_outputs" if route == "shardc" else "cost_aware_mismatched_outputs"]
    assert not mismatched, (
        f"{row['name']} ({route}): output shardings differ from jax.jit's at {mismatched}")


@pytest.mark.parametrize("route", ROUTES)
def test_collective_bytes_at_most_jax_jit(row, route):
    row = measured(row, route)
    assert row["collective_bytes"][route] <= row["collective_bytes"]["jax"], (
        f"{row['name']} ({route}): {row['collective_bytes'][route]} collective bytes per device, "
        f"jax.jit {row['collective_bytes']['jax']}; {route} {row['collectives'][route]}, "
        f"jax.jit {row['collectives']['jax']}"
    )


def test_cost_aware_never_more_bytes_or_memory_than_shardys_choices(row):
    row = measured(measured(row, "shardc"), "cost-aware")
    for figure in ("collective_bytes", "memory_bytes"):
        assert row[figure]["cost-aware"] <= row[figure]["shardc"], (
            f"{row['name']}: cost-aware {figure} {row[figure]['cost-aware']}, "
            f"Shardy's choices {row[figure]['shardc']}")


def test_cost_aware_finds_the_hand_written_activation_constraints():
    """lm_linen_unconstrained is lm_linen without its activation constraints: the
    cost-aware route must compile it to at most 1.2x the collective bytes of the
    hand-constrained step (jax.jit's), in no more memory (Shardy's choices: 3x)."""
    constrained = measured(measure_program("lm_linen"), "shardc")
    free = measured(measure_program("lm_linen_unconstrained"), "cost-aware")
    assert free["collective_bytes"]["cost-aware"] <= 1.2 * constrained["collective_bytes"]["jax"]
    assert free["memory_bytes"]["cost-aware"] <= constrained["memory_bytes"]["jax"]
    assert free["collective_bytes"]["shardc"] > 2 * constrained["collective_bytes"]["jax"]


@pytest.mark.parametrize("route", ROUTES)
def test_predictions_match_what_xla_compiled(row, route):
    """``comm_report()`` within 5% of XLA's bytes per collective kind and
    ``memory_estimate()`` within 10% of XLA's memory; a program whose prediction is
    still off on a route is listed in ``report.PREDICTION_MISSES`` under (name, route)
    with the reason, and must still be off there (the list cannot go stale)."""
    row = measured(row, route)
    assert not row["prediction_error"].get(route), row["prediction_error"][route]
    misses = report.prediction_misses(row, route)
    if (row["name"], route) in report.PREDICTION_MISSES:
        assert misses, f"{row['name']} ({route}) is now predicted: drop it from PREDICTION_MISSES"
    else:
        assert not misses, f"{row['name']} ({route}): predicted / compiled {misses}"


def test_zoo_has_every_program():
    assert tuple(REGISTRY) == PROGRAMS


def test_table_shows_failures_and_measured_rows():
    failed = {"name": "broken", "mesh": "x=8", "error": "ValueError: bad | spec",
              "jax_deterministic": True}  # fmt: skip
    line = report.format_row(failed)
    assert "| broken | x=8 | yes | **failed**: ValueError: bad \\| spec / — | — / — |" in line
    assert len(line.strip("|").split("|")) - 1 == len(report.HEADER.strip("|").split("|"))
    kinds = {"all-reduce": {"count": 2, "bytes_per_device": 2048}}
    ok = {
        "name": "ok", "mesh": "data=4×model=2", "error": None, "jax_deterministic": True,
        "max_rel_error": 0.0, "cost_aware_max_rel_error": 1e-7,
        "bitwise_equal": {"shardc": True, "cost-aware": False},
        "mismatched_outputs": [], "cost_aware_mismatched_outputs": ["[1]"],
        "collectives": {"jax": kinds, "shardc": kinds, "cost-aware": {}},
        "collective_bytes": {"jax": 2048, "shardc": 2048, "cost-aware": 0},
        "memory_bytes": {"jax": 1024, "shardc": 1024, "cost-aware": 512},
        "lower_seconds": dict.fromkeys(("jax", "shardc", "cost-aware"), 0.5),
        "compile_seconds": dict.fromkeys(("jax", "shardc", "cost-aware"), 1.5),
        "call_microseconds": {}, "cost_aware_error": None,
    }  # fmt: skip
    cells = [cell.strip() for cell in report.format_row(ok).strip("|").split("|")]
    assert len(cells) == len(report.HEADER.strip("|").split("|"))
    assert cells[2:8] == ["yes", "0 (bitwise) / 1.0e-07", "yes / no: [1]",
                          "2.0 KiB (AR 2.0 KiB ×2)", "same", "0.00× (none)"]  # fmt: skip
