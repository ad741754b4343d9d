"""``bench.dispatch``'s caller-CPU table: its rows, and the README section it writes."""

import types
import weakref

import jax

from bench import dispatch
from bench.render_readme import splice


def test_call_rows_time_both_routes_on_every_kind_of_call():
    mesh = jax.make_mesh((4, 2), ("x", "y"))
    rows = dispatch.call_rows(mesh, rounds=1, calls=2, leaf_counts=(2,))
    assert [row["call"] for row in rows] == list(dispatch.call_kinds(jax.jit,
                                                                     dispatch.placed(mesh, 2)))
    assert [("deleting_ratio" in row) for row in rows] == [False, False, True, True]
    for row in rows:
        assert row["leaves"] == 2
        assert row["jax_thread_us"] > 0 and row["shardc_thread_us"] > 0
        assert abs(row["thread_ratio"] - row["shardc_thread_us"] / row["jax_thread_us"]) < 0.01


def test_a_call_lets_go_of_the_arguments_it_was_given_before_the_clock_stops(monkeypatch):
    # A donating call's fresh arrays go before the second reading, as in a loop
    # ``x = f(x)``: jax.jit's caller pays for freeing the buffers its call consumed.
    class Arguments:
        pass

    given = Arguments()
    alive = weakref.ref(given)
    readings = []
    clock = types.SimpleNamespace(thread_time=lambda: readings.append(alive() is not None) or 0.0,
                                  process_time=lambda: 0.0)
    monkeypatch.setattr(dispatch, "time", clock)
    holder = [given]
    del given
    dispatch.caller_cpu(lambda arguments: [], holder)
    assert readings == [True, False] and holder == []
    # Arguments the caller keeps (a non-donating call's) stay.
    kept = Arguments()
    readings.clear()
    alive = weakref.ref(kept)
    dispatch.caller_cpu(lambda arguments: [], [kept])
    assert readings == [True, True]


def test_the_readme_section_goes_between_its_markers():
    rows = [{"call": "jit(f)(x)", "leaves": 1, "jax_thread_us": 60.0,
             "shardc_thread_us": 63.0, "thread_ratio": 1.05, "jax_process_us": 200.0,
             "shardc_process_us": 210.0, "process_ratio": 1.05},
            {"call": "compiled(x), donating", "leaves": 20, "jax_thread_us": 100.0,
             "shardc_thread_us": 120.0, "thread_ratio": 1.2, "jax_process_us": 300.0,
             "shardc_process_us": 330.0, "process_ratio": 1.1, "jax_deleting_thread_us": 115.0,
             "deleting_ratio": 1.043}]
    text = f"before\n{dispatch.START}\nold\n{dispatch.END}\nafter\n"
    spliced = splice(text, dispatch.readme_section(rows, rounds=3, calls=10),
                     dispatch.START, dispatch.END)
    assert spliced.startswith("before\n") and spliced.endswith("after\n")
    assert "old" not in spliced
    assert "| `jit(f)(x)` | 1 | 60.0 | 63.0 | 1.05× | | | 1.05× |" in spliced
    assert "| `compiled(x), donating` | 20 | 100.0 | 120.0 | 1.20× | 115.0 | 1.04× | 1.10× |" \
        in spliced
    assert "medians of 30 calls of each" in spliced
