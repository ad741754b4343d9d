"""AUTO shardings: the search's choices are ordinary shardings jax.jit agrees with."""

import dataclasses
import math
import time
import types

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P
from jaxlib.mlir import ir

from bench import auto_search as auto_bench
from shardc.compiler import AUTO, jit, pjit
from shardc.compiler.auto import AutoShardingError, modelled_step
from shardc.compiler.auto import search as search_module
from shardc.compiler.auto.candidates import tensor_sharding
from shardc.compiler.auto.evaluate import Evaluator
from shardc.compiler.auto.objective import StepTime
from shardc.compiler.auto.search import MODEL_ERROR, SAME_SECONDS, Search
from shardc.compiler.cost.platforms import hardware


@pytest.fixture(scope="module")
def mesh():
    return jax.make_mesh((2, 4), ("data", "model"), axis_types=(AxisType.Auto,) * 2)


train_step = auto_bench.mlp_step  # a residual MLP stack's SGD step


def _mlp(layers=2):
    """Host arrays for ``train_step``: ``(params, x, y)``."""
    return auto_bench.mlp_case(layers=layers, d=64, hidden=256, batch=32).args


def _abstract_mesh():
    return jax.sharding.AbstractMesh((2, 4), ("data", "model"), axis_types=(AxisType.Auto,) * 2)


def _shardings_on(tree, mesh):
    leaves = jax.tree.leaves(tree)
    assert leaves and all(isinstance(s, NamedSharding) and s.mesh == mesh for s in leaves)
    return leaves


def _close(got, want):
    for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(want), strict=True):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-6)


def _step_with(mesh, args, in_specs):
    """The objective of ``train_step`` with these argument specs, as AUTO prices states."""
    in_shardings = jax.tree.map(lambda spec: NamedSharding(mesh, spec), in_specs,
                                is_leaf=lambda s: isinstance(s, P))
    lowered = jit(train_step, in_shardings=in_shardings, mesh=mesh).trace(*args).lower(
        propagate=False)
    return modelled_step(lowered.module).seconds


def test_auto_train_step_runs_as_jax_jit_with_the_chosen_shardings(mesh):
    args = _mlp()
    lowered = jit(train_step, in_shardings=AUTO, out_shardings=AUTO, mesh=mesh).lower(*args)
    in_shardings, out_shardings = lowered.in_shardings[0], lowered.out_shardings
    _shardings_on(in_shardings, mesh)
    _shardings_on(out_shardings, mesh)
    compiled = lowered.compile()
    assert jax.tree.leaves(compiled.input_shardings[0]) == jax.tree.leaves(in_shardings)
    assert jax.tree.leaves(compiled.output_shardings) == jax.tree.leaves(out_shardings)

    got = compiled(*args)  # host arrays: placed by the chosen shardings
    _close(got, jax.jit(train_step)(*args))
    # jax.jit given the chosen shardings computes the same, laid out the same.
    want = jax.jit(train_step, in_shardings=in_shardings, out_shardings=out_shardings)(*args)
    _close(got, want)
    for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(want)):
        assert a.sharding.is_equivalent_to(b.sharding, a.ndim)
    # The chosen specs paste into ordinary code: device_put, then the jitted function.
    placed = jax.device_put(args, tuple(in_shardings))
    _close(jit(train_step, in_shardings=AUTO, out_shardings=AUTO, mesh=mesh)(*placed), got)


def test_auto_is_no_slower_than_data_parallel_or_replicated(mesh):
    args = _mlp()
    lowered = jit(train_step, in_shardings=AUTO, out_shardings=AUTO, mesh=mesh).lower(*args)
    report = lowered.auto_report()
    chosen = report.step.seconds
    replicated = _step_with(mesh, args, jax.tree.map(lambda _: P(), args))
    batch = P(("data", "model"))
    data_parallel = _step_with(mesh, args, (jax.tree.map(lambda _: P(), args[0]), batch, batch))
    assert chosen <= data_parallel and chosen <= replicated, report.format_text()
    # The search priced the state it chose: the lowering's own shardings cost the same.
    assert _step_with(mesh, args, tuple(
        jax.tree.map(lambda s: s.spec, lowered.in_shardings[0]))) == pytest.approx(chosen)


def test_auto_report_says_why_and_what_the_runner_up_costs(mesh):
    args = _mlp(layers=6)
    lowered = jit(train_step, in_shardings=AUTO, out_shardings=AUTO, mesh=mesh).lower(*args)
    report = lowered.auto_report()
    # The middle layers' weights share one choice (searched once).
    assert max(len(c.arguments) for c in report.choices) >= 4
    assert len(report.choices) < len(jax.tree.leaves(args))
    for choice in report.choices:
        assert choice.runner_up is not None and choice.runner_up != choice.chosen
        assert (choice.step.seconds, choice.step.memory_peak) <= (
            choice.runner_up_step.seconds, choice.runner_up_step.memory_peak)
    text = report.format_text()
    assert "runner-up" in text and "params[1][0]" in text


def test_auto_out_shardings_with_given_in_shardings(mesh):
    w = np.arange(64 * 128, dtype=np.float32).reshape(64, 128) / 1e3
    x = np.ones((16, 64), np.float32)
    in_shardings = (NamedSharding(mesh, P(None, "model")), NamedSharding(mesh, P("data")))
    f = jit(lambda w, x: jnp.tanh(x @ w), in_shardings=in_shardings, out_shardings=AUTO,
            mesh=mesh)
    lowered = f.lower(w, x)
    assert lowered.in_shardings[0] == in_shardings
    (out_sharding,) = _shardings_on(lowered.out_shardings, mesh)
    assert out_sharding.spec == P("data", "model")  # what propagation gives, kept
    got = f(w, x)
    want = jax.jit(lambda w, x: jnp.tanh(x @ w), in_shardings=in_shardings,
                   out_shardings=out_sharding)(w, x)
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-6)
    assert got.sharding.is_equivalent_to(want.sharding, 2)


def test_memory_budget_forces_sharded_parameters(mesh):
    # Unbounded, data parallel is cheapest (the row sums need no collective with the
    # weight replicated); a budget under the weight's 1 MiB forces it apart.
    w = np.ones((512, 512), np.float32) / 512
    x = np.ones((64, 512), np.float32)
    f = lambda w, x: jnp.sum(jnp.tanh(x @ w), axis=1)  # noqa: E731
    free = jit(f, in_shardings=AUTO, out_shardings=AUTO, mesh=mesh).lower(w, x)
    assert free.auto_report().budget is None
    assert free.in_shardings[0][0].spec == P()
    budget = 400_000
    assert free.auto_report().step.memory_peak > budget
    tight = jit(f, in_shardings=AUTO, out_shardings=AUTO, mesh=mesh, memory_budget=budget)
    lowered = tight.lower(w, x)
    report = lowered.auto_report()
    assert report.budget == budget and report.step.memory_peak <= budget, report.format_text()
    w_shard = lowered.in_shardings[0][0].shard_shape(w.shape)
    assert w.size // (w_shard[0] * w_shard[1]) >= 4
    np.testing.assert_allclose(np.asarray(tight(w, x)), np.asarray(jax.jit(f)(w, x)),
                               rtol=1e-5)


def _xla_memory(compiled) -> int:
    """Per-device bytes as XLA's memory analysis adds them up."""
    stats = compiled.memory_analysis()
    return (stats.argument_size_in_bytes + stats.output_size_in_bytes
            + stats.temp_size_in_bytes - stats.alias_size_in_bytes)


def _half_of_data_parallel(mesh):
    """A two-layer MLP train step's arguments and half of data parallel's memory per
    device as XLA compiles it (weights and their updates replicated)."""
    params, x, y = auto_bench.mlp_case(layers=2, d=256, hidden=512, batch=64).args
    replicated = NamedSharding(mesh, P())
    batch = NamedSharding(mesh, P(("data", "model")))
    dp = jax.jit(train_step, in_shardings=(jax.tree.map(lambda _: replicated, params),
                                           batch, batch)).lower(params, x, y).compile()
    return (params, x, y), _xla_memory(dp) // 2


def test_memory_budget_is_met_as_xla_compiles_the_choice(mesh):
    # A two-layer MLP train step with wide weights: under a budget of half of data
    # parallel's memory as XLA compiles it (weights and their updates replicated),
    # AUTO shards the weights and XLA's memory of the choice fits the budget,
    # computing what jax.jit computes with those shardings.
    (params, x, y), budget = _half_of_data_parallel(mesh)
    tight = jit(train_step, in_shardings=AUTO, out_shardings=AUTO, mesh=mesh,
                memory_budget=budget)
    lowered = tight.lower(params, x, y)
    report = lowered.auto_report()
    assert report.step.estimated and report.step.memory_peak <= budget, report.format_text()
    # A runner-up faster than the choice lost on memory: the model judged it over the
    # budget. A slower one lost on time and is not judged (the budget's memory model
    # runs only where it changes a ranking).
    for choice in report.choices:
        if choice.runner_up_step is not None and (
                choice.runner_up_step.seconds < choice.step.seconds):
            assert choice.runner_up_step.estimated, report.format_text()
            assert choice.runner_up_step.memory_peak > budget, report.format_text()
            assert "exceeds the budget" in choice.why(budget)
    xla = _xla_memory(lowered.compile())
    assert xla <= budget, (xla, report.format_text())
    assert any(s.spec != P() for s in jax.tree.leaves(lowered.in_shardings[0][0]))
    want = jax.jit(train_step, in_shardings=lowered.in_shardings[0],
                   out_shardings=lowered.out_shardings)(params, x, y)
    _close(tight(params, x, y), want)


def test_the_budget_holds_where_the_memory_model_counts_the_choice_short(mesh):
    # A one-layer decoder train step under 0.7x data parallel's XLA memory: the state
    # the memory model puts within the budget (1.33 MB of 1.40 MB) XLA compiles at
    # 1.61 MB. AUTO compiles its choice, and a state over the budget as compiled is
    # replaced by one within it: the program returned fits, computing what jax.jit
    # computes with those shardings.
    params, x, y = auto_bench.llama_case(layers=1, d=128, hidden=256, batch=8, seq=32).args
    step = auto_bench.llama_step
    batch = NamedSharding(mesh, P(("data", "model")))
    dp = jax.jit(step, in_shardings=(jax.tree.map(lambda _: NamedSharding(mesh, P()), params),
                                     batch, batch)).lower(params, x, y).compile()
    budget = int(_xla_memory(dp) * 0.7)
    tight = jit(step, in_shardings=AUTO, out_shardings=AUTO, mesh=mesh, memory_budget=budget)
    lowered = tight.lower(params, x, y)
    report = lowered.auto_report()
    xla = _xla_memory(lowered.compile())
    assert report.compiled_memory == xla <= budget, report.format_text()
    assert report.budget == budget and f"(compiled: {xla} B)" in report.format_text()
    if report.model_budget is not None:  # a state compiled over the budget: the model held
        assert report.model_budget < budget and report.step.memory_peak <= report.model_budget
    want = jax.jit(step, in_shardings=lowered.in_shardings[0],
                   out_shardings=lowered.out_shardings)(params, x, y)
    _close(tight(params, x, y), want)


def test_a_budget_a_textbook_configuration_meets_is_met_no_slower_than_it(mesh, monkeypatch):
    # A two-layer MLP train step under half of data parallel's XLA memory, where XLA
    # compiles every state but the textbook configurations (data parallel, FSDP, tensor
    # parallel, FSDP x TP) over the budget: the states the held model bytes rank next
    # are all over, so the check falls back on the textbook configurations within the
    # budget by the model (each compiled as it is). AUTO returns one within the budget,
    # no slower by the model than the fastest textbook configuration XLA fits in it,
    # computing what jax.jit computes with those shardings.
    (params, x, y), budget = _half_of_data_parallel(mesh)
    fitting: list[float] = []  # the textbook configurations' steps XLA fits in the budget
    compiled_over: list[float] = []
    fit_compiled = Search.fit_compiled

    def check(search, outcome, compiled_memory):
        textbook = set(search._textbook)
        for key in textbook:
            state = search._outcome(0.0, False, key)
            if compiled_memory(state) <= budget:
                fitting.append(state.step.seconds)

        def memory(chosen):
            xla = compiled_memory(chosen)
            if search._key(chosen) in textbook:
                return xla
            compiled_over.append(chosen.step.seconds)
            return max(xla, budget + 1)

        return fit_compiled(search, search._outcome(0.0, False), memory)

    monkeypatch.setattr(Search, "fit_compiled", check)
    # XLA as this check stands it in is short of the model by any amount: no state is
    # far enough within the budget to go uncompiled.
    monkeypatch.setattr(search_module, "MODEL_ERROR", math.inf)
    tight = jit(train_step, in_shardings=AUTO, out_shardings=AUTO, mesh=mesh,
                memory_budget=budget)
    lowered = tight.lower(params, x, y)
    report = lowered.auto_report()
    assert fitting and compiled_over, report.format_text()
    assert report.compiled_memory == _xla_memory(lowered.compile()) <= budget, (
        report.format_text())
    assert report.step.seconds <= min(fitting), (report.step.seconds, fitting)
    want = jax.jit(train_step, in_shardings=lowered.in_shardings[0],
                   out_shardings=lowered.out_shardings)(params, x, y)
    _close(tight(params, x, y), want)


def test_a_budget_of_the_expert_like_states_own_memory_is_met_no_slower_than_it(
        mesh, monkeypatch):
    # A two-layer MLP train step whose budget is XLA's memory of the textbook FSDP x
    # tensor parallel state with its activations constrained (MaxText's), the memory
    # model counting that state 10% over it (it counts some states long: XLA reuses a
    # buffer its walk keeps) and every faster state twice over it, so the search ranks
    # a slower state first. The compiled check compiles the textbook states that rank
    # before its choice but for their memory, within the model's error of the budget:
    # AUTO returns a state no slower by the model than MaxText's, within the budget as
    # XLA compiles it, computing what jax.jit computes.
    params, x, y = _mlp()
    expert: dict = {}
    fit_compiled = Search.fit_compiled

    def measure(search, outcome, compiled_memory):
        chosen, key = search._key(outcome), search._expert_like
        expert["memory"] = compiled_memory(search._outcome(0.0, False, key))
        expert["seconds"] = search._priced[key].seconds
        return fit_compiled(search, search._outcome(0.0, False, chosen), compiled_memory)

    monkeypatch.setattr(Search, "fit_compiled", measure)
    jit(train_step, in_shardings=AUTO, out_shardings=AUTO, mesh=mesh,
        memory_budget=1 << 40).lower(params, x, y)
    monkeypatch.setattr(Search, "fit_compiled", fit_compiled)
    budget = expert["memory"]
    estimate = Search._estimate

    def counted_long(search, key):
        step = estimate(search, key)
        if key == search._expert_like:
            return dataclasses.replace(step, memory_peak=budget + budget // 10)
        if step.seconds < expert["seconds"] * (1 - SAME_SECONDS):
            return dataclasses.replace(step, memory_peak=2 * budget)
        return step

    monkeypatch.setattr(Search, "_estimate", counted_long)
    tight = jit(train_step, in_shardings=AUTO, out_shardings=AUTO, mesh=mesh,
                memory_budget=budget)
    lowered = tight.lower(params, x, y)
    report = lowered.auto_report()
    assert report.step.seconds <= expert["seconds"] * (1 + SAME_SECONDS), (
        expert, report.format_text())
    assert report.compiled_memory == _xla_memory(lowered.compile()) <= budget, (
        report.format_text())
    want = jax.jit(train_step, in_shardings=lowered.in_shardings[0],
                   out_shardings=lowered.out_shardings)(params, x, y)
    _close(tight(params, x, y), want)


def _lowered_with_compiles_of_an_hour(monkeypatch, mesh, check, hours, args, budget):
    """AUTO under ``budget`` with ``check`` standing for the compiled check, each
    compile counted as an hour of the clock (``hours``) so the tries run out, and the
    model's error unbounded: the jitted step and its lowering."""
    monkeypatch.setattr(Search, "fit_compiled", check)
    monkeypatch.setattr(search_module, "time", types.SimpleNamespace(
        perf_counter=lambda: time.perf_counter() + 3600 * hours[0]))
    monkeypatch.setattr(search_module, "MODEL_ERROR", math.inf)
    tight = jit(train_step, in_shardings=AUTO, out_shardings=AUTO, mesh=mesh,
                memory_budget=budget)
    return tight, tight.lower(*args)


def test_a_textbook_state_the_model_counts_over_the_budget_is_compiled_before_giving_up(
        mesh, monkeypatch):
    # A two-layer MLP train step under half of data parallel's XLA memory, where XLA
    # compiles every state over the budget but one textbook configuration the memory
    # model puts over it (the model counts it long: XLA reuses a buffer its walk
    # keeps). Once the tries are spent on the states ranked, the check compiles the
    # textbook configurations within the model's error of the budget before giving
    # up: AUTO returns that one, within the budget, computing what jax.jit computes.
    (params, x, y), budget = _half_of_data_parallel(mesh)
    fitting: list[tuple] = []
    returned: list[tuple] = []
    fit_compiled = Search.fit_compiled

    def check(search, outcome, compiled_memory):
        over = [k for k in search._textbook if search._estimate(k).memory_peak > budget]
        fitting.append(min(over, key=lambda k: search._estimate(k).memory_peak))

        def memory(chosen):
            xla = compiled_memory(chosen)
            hours[0] += 1  # each compile stands for one of a large step: the tries run out
            return min(xla, budget) if search._key(chosen) == fitting[0] else max(
                xla, budget + 1)

        result = fit_compiled(search, search._outcome(0.0, False), memory)
        returned.append(search._key(result))
        return result

    hours = [0]
    tight, lowered = _lowered_with_compiles_of_an_hour(monkeypatch, mesh, check, hours,
                                                       (params, x, y), budget)
    report = lowered.auto_report()
    assert returned == fitting and report.compiled_memory <= budget, report.format_text()
    assert report.step.memory_peak > budget, report.format_text()
    want = jax.jit(train_step, in_shardings=lowered.in_shardings[0],
                   out_shardings=lowered.out_shardings)(params, x, y)
    _close(tight(params, x, y), want)


def test_a_descent_under_the_bytes_held_finds_a_state_within_the_budget(mesh, monkeypatch):
    # A two-layer MLP train step under half of data parallel's XLA memory, where XLA
    # compiles every state priced when the check starts (textbook ones included) over
    # the budget, the others at the model's bytes scaled by the same error: no state
    # priced is within the model's bytes held to that error, so once the tries and
    # the textbook configurations are spent, the check descends under them and
    # compiles a lighter state, which fits. AUTO returns it, computing what jax.jit
    # computes with those shardings.
    (params, x, y), budget = _half_of_data_parallel(mesh)
    priced: list[set] = []
    fit_compiled = Search.fit_compiled

    def check(search, outcome, compiled_memory):
        priced.append({k for k in search._priced if len(k) == len(search.groups)})
        scale = 1.01 * budget / min(search._estimate(k).memory_peak for k in priced[0])

        def memory(chosen):
            hours[0] += 1  # each compile stands for one of a large step: the tries run out
            model = int(chosen.step.memory_peak * scale)
            return max(model, budget + 1) if search._key(chosen) in priced[0] else model

        return fit_compiled(search, search._outcome(0.0, False), memory)

    hours = [0]
    tight, lowered = _lowered_with_compiles_of_an_hour(monkeypatch, mesh, check, hours,
                                                       (params, x, y), budget)
    report = lowered.auto_report()
    assert report.compiled_memory <= budget, report.format_text()
    want = jax.jit(train_step, in_shardings=lowered.in_shardings[0],
                   out_shardings=lowered.out_shardings)(params, x, y)
    _close(tight(params, x, y), want)


def test_a_descent_from_the_state_least_over_holds_the_model_to_its_own_error(
        mesh, monkeypatch):
    # A two-layer MLP train step under half of data parallel's XLA memory, where XLA
    # compiles the search's choice 1 B over the budget and every other state priced
    # when the check starts 2 B over it, and the states lighter than the choice by the
    # model (its neighbours the search had not priced) within it. Once the tries are
    # spent, the check descends from the choice (least over) under the model's bytes
    # held to the choice's own error, and compiles the lighter state it ends in: AUTO
    # returns it, within the budget, computing what jax.jit computes.
    (params, x, y), budget = _half_of_data_parallel(mesh)
    origins: list[tuple] = []
    fit_compiled = Search.fit_compiled
    descent_from = Search._descent_from

    def descend(search, origin, held):
        origins.append((origin, held))
        return descent_from(search, origin, held)

    def check(search, outcome, compiled_memory):
        priced = {k for k in search._priced if len(k) == len(search.groups)}
        choice = search._key(outcome)
        model = search._estimate(choice).memory_peak

        def memory(chosen):
            hours[0] += 1  # each compile stands for one of a large step: the tries run out
            key = search._key(chosen)
            if key == choice:
                return budget + 1
            return budget + 2 if key in priced or chosen.step.memory_peak >= model else budget

        result = fit_compiled(search, outcome, memory)
        assert origins[0] == (choice, int(budget * model / (budget + 1)))
        return result

    monkeypatch.setattr(Search, "_descent_from", descend)
    hours = [0]
    tight, lowered = _lowered_with_compiles_of_an_hour(monkeypatch, mesh, check, hours,
                                                       (params, x, y), budget)
    report = lowered.auto_report()
    assert report.compiled_memory == budget, report.format_text()
    want = jax.jit(train_step, in_shardings=lowered.in_shardings[0],
                   out_shardings=lowered.out_shardings)(params, x, y)
    _close(tight(params, x, y), want)


def test_states_that_propagate_alike_are_compiled_once(mesh, monkeypatch):
    # A two-layer MLP train step under half of data parallel's XLA memory, where every
    # state compiles over the budget and the clock stands still (the tries never run
    # out): the check goes through every complete state priced. States whose activation
    # constraints propagation fills as it would unconstrained propagate to the same
    # shardings, one program: each such program is compiled once, its twins taking its
    # bytes. AUTO returns the first compiled, computing what jax.jit computes.
    (params, x, y), budget = _half_of_data_parallel(mesh)
    programs: list[tuple] = []  # the program of each compile
    compiled: list[int] = []  # XLA's bytes of two twins
    states: list[dict] = []  # program -> keys, over the complete states priced
    fit_compiled = Search.fit_compiled

    def check(search, outcome, compiled_memory):
        by_program: dict[tuple, list] = {}
        for key in (k for k in search._priced if len(k) == len(search.groups)):
            by_program.setdefault(search._program(key), []).append(key)
        states.append(by_program)
        twins = next(keys for keys in by_program.values() if len(keys) > 1)
        compiled.extend(compiled_memory(search._outcome(0.0, False, k)) for k in twins[:2])

        def memory(chosen):
            programs.append(search._program(search._key(chosen)))
            return budget + 1

        return fit_compiled(search, search._outcome(0.0, False), memory)

    monkeypatch.setattr(Search, "fit_compiled", check)
    monkeypatch.setattr(search_module, "time", types.SimpleNamespace(perf_counter=lambda: 0.0))
    monkeypatch.setattr(search_module, "MODEL_ERROR", math.inf)
    tight = jit(train_step, in_shardings=AUTO, out_shardings=AUTO, mesh=mesh,
                memory_budget=budget)
    lowered = tight.lower(params, x, y)
    (by_program,) = states
    assert compiled[0] == compiled[1]  # twins were priced, and XLA compiles them alike
    assert sorted(programs) == sorted(by_program), (len(programs), len(by_program))
    want = jax.jit(train_step, in_shardings=lowered.in_shardings[0],
                   out_shardings=lowered.out_shardings)(params, x, y)
    _close(tight(params, x, y), want)


def test_a_choice_far_within_the_budget_is_not_compiled(mesh, monkeypatch):
    # The model puts the choice under the budget by more than its error against XLA
    # (search.MODEL_ERROR): compiling it could not move it over, so no compile runs.
    (params, x, y), half = _half_of_data_parallel(mesh)
    compiles = []
    fit_compiled = Search.fit_compiled
    monkeypatch.setattr(Search, "fit_compiled", lambda search, outcome, compiled_memory: (
        fit_compiled(search, outcome, lambda o: compiles.append(o) or compiled_memory(o))))
    budget = 64 * half  # 32x data parallel's XLA memory
    lowered = jit(train_step, in_shardings=AUTO, out_shardings=AUTO, mesh=mesh,
                  memory_budget=budget).lower(params, x, y)
    report = lowered.auto_report()
    assert report.step.memory_peak * (1 + MODEL_ERROR) <= budget, report.format_text()
    assert not compiles and report.compiled_memory is None, report.format_text()
    assert _xla_memory(lowered.compile()) <= budget


def test_the_best_textbook_state_is_refined_to_a_local_optimum(mesh, monkeypatch):
    # The refinement takes axes off the best textbook configuration's weights while the
    # modelled step gets faster: what it returns is no slower, each weight's spec the
    # configuration's with axes taken off, and no one more axis taken off is faster
    # (but by replicating work past the flops limit).
    refined = []
    refine = Search._refine

    def record(search, key):
        found = refine(search, key)
        refined.append((search, key, found))
        return found

    monkeypatch.setattr(Search, "_refine", record)
    params, x, y = _mlp()
    jit(train_step, in_shardings=AUTO, out_shardings=AUTO, mesh=mesh).lower(params, x, y)
    (search, start, found), = refined
    seconds = search._priced[found].seconds
    assert seconds <= search._priced[start].seconds
    assert found in search._textbook
    before, after = dict(start), dict(found)
    for g, group in enumerate(search.groups):
        if group.updated:
            assert all(set(a) <= set(b) for a, b in zip(after[g], before[g]))
            for axis in {a for dim in after[g] for a in dim}:
                fewer = tuple(tuple(a for a in dim if a != axis) for dim in after[g])
                move = search.price({**after, g: fewer})
                assert search._priced[move].seconds >= seconds * (1 - 1e-6) or (
                    search._priced[move].flops > search.flops_limit)
        else:
            assert after[g] == before[g]


def test_an_abstract_mesh_budget_is_the_memory_models():
    # Nothing compiles for an AbstractMesh: the budget is judged by the model alone.
    params, x, y = _mlp()
    abstract = _abstract_mesh()
    budget = 1 << 30
    report = jit(train_step, in_shardings=AUTO, out_shardings=AUTO, mesh=abstract,
                 memory_budget=budget).lower(params, x, y).auto_report()
    assert report.compiled_memory is None and report.model_budget is None
    assert report.step.estimated and report.step.memory_peak <= budget, report.format_text()
    assert "compiled" not in report.format_text()


def test_proposals_under_a_budget_spare_the_memory_model_and_keep_the_choice(monkeypatch):
    # The greedy pass's decisions and a descent sweep's candidates only propose states:
    # a state over the budget by its scaled quick peak is taken as over there, unjudged,
    # and the rankings of whole states (seeds, moves, the outcome) judge by the model.
    # Judging every state of every ranking by the model chooses the same state, asking
    # it more often. On an AbstractMesh: the budget is the model's alone (on devices the
    # choice is compiled too, ``test_the_budget_holds_where_the_memory_model_counts_...``).
    mesh = _abstract_mesh()
    params, x, y = auto_bench.mlp_case(layers=3, d=128, hidden=512, batch=64).args
    free = jit(train_step, in_shardings=AUTO, out_shardings=AUTO, mesh=mesh).lower(
        params, x, y)
    # a budget that binds (under the free state's memory) and that some state meets
    budget = int(free.memory_estimate(platform="cpu").net_bytes * 0.91)
    judged = []
    model = Evaluator.memory
    monkeypatch.setattr(Evaluator, "memory",
                        lambda self, reader: judged.append(1) or model(self, reader))

    def search():
        judged.clear()
        lowered = jit(train_step, in_shardings=AUTO, out_shardings=AUTO, mesh=mesh,
                      memory_budget=budget).lower(params, x, y)
        assert not lowered.auto_report().exhaustive
        return lowered.auto_report(), len(judged)

    report, asked = search()
    monkeypatch.setattr(Search, "_proposed", Search._estimate)
    every, asked_every = search()
    assert [c.chosen for c in report.choices] == [c.chosen for c in every.choices]
    assert report.step == every.step and report.step.memory_peak <= budget
    assert asked < asked_every, (asked, asked_every)


def test_a_proposal_asks_the_memory_model_only_where_the_scaled_peak_fits():
    class Model:
        """The memory model's bytes of each state (its reader here), counting asks."""

        def __init__(self, model_bytes):
            self.model_bytes, self.asked = model_bytes, []

        def __call__(self, assignment):  # the state with every argument open
            return StepTime(1.0, 0.0, 1.0, 0, 0, 100), "open"

        def memory(self, reader):
            self.asked.append(reader)
            return self.model_bytes[reader]

    # state: seconds, quick peak, the model's bytes; the open state's ratio is 2
    states = {"a": (1.0, 90, 400), "b": (2.0, 40, 90), "c": (3.0, 30, 70)}
    model = Model({"open": 200, **{k: v[2] for k, v in states.items()}})
    search = Search(model, [], [], 100)
    for key, (seconds, quick, _) in states.items():
        search._priced[key] = StepTime(seconds, 0.0, 1.0, 0, 0, quick)
        search._quick[key] = (seconds, quick, len(search._quick))
        search._readers[key] = key
    # "a" is over by its quick peak times 2: it waits, and "b" fits by the model.
    assert search.ranked(states, proposing=True)[0] == "b"
    assert model.asked == ["open", "b"]
    # A ranking of whole states asks the model about every state faster than a fit.
    assert search.ranked(states)[0] == "b" and model.asked == ["open", "b", "a"]


def test_auto_needs_a_mesh():
    f = jit(lambda x: x * 2, in_shardings=AUTO)
    with pytest.raises(ValueError, match="AUTO shardings need a mesh"):
        f.lower(np.ones(8, np.float32))
    with pytest.raises(AutoShardingError):
        f(np.ones(8, np.float32))


def test_memory_budget_without_auto_is_an_error(mesh):
    with pytest.raises(ValueError, match="no leaf of in_shardings or out_shardings is AUTO"):
        jit(lambda x: x, mesh=mesh, memory_budget=1 << 20)


@pytest.mark.parametrize("budget, error, words", [
    (-1, ValueError, "must be a positive number of bytes per device, got -1"),
    (0, ValueError, "must be a positive number of bytes per device, got 0"),
    ("1GB", TypeError, "memory_budget must be a number of bytes \\(an int\\) or None, got '1GB'"),
    (float("nan"), TypeError, "memory_budget must be a number of bytes"),
])
def test_a_memory_budget_that_is_no_byte_count_is_refused_at_jit(mesh, budget, error, words):
    with pytest.raises(error, match=words):
        jit(lambda x: x * 2, in_shardings=AUTO, mesh=mesh, memory_budget=budget)


def test_an_unhashable_static_argument_is_jax_jits_error_under_auto(mesh):
    f = lambda x, n: x * len(n)  # noqa: E731
    x = np.ones((8, 4), np.float32)
    with pytest.raises(ValueError, match="Non-hashable static arguments are not supported") as jax_error:
        jax.jit(f, static_argnums=1)(x, [1])
    with pytest.raises(type(jax_error.value), match="Non-hashable static arguments are not supported"):
        jit(f, in_shardings=AUTO, static_argnums=1, mesh=mesh)(x, [1])


def test_auto_under_the_context_mesh(mesh):
    x = np.arange(32.0, dtype=np.float32).reshape(8, 4)
    with jax.set_mesh(mesh):
        lowered = jit(lambda x: jnp.sin(x) * 2, in_shardings=AUTO, out_shardings=AUTO).lower(x)
    _shardings_on(lowered.in_shardings, mesh)
    np.testing.assert_allclose(np.asarray(lowered.compile()(x)), np.sin(x) * 2, rtol=1e-6)


def test_the_search_prices_the_program_mesh_beside_an_empty_one(mesh):
    # The int step makes jax's module hold an ``empty_mesh`` symbol besides ``mesh``;
    # a flax train state's module names it first. The candidates must name the
    # program's mesh (the search once priced the states of such a program on the empty
    # one, as free of collectives).
    def f(step, w, x):
        return jnp.sum(jnp.tanh(x @ w)), step + 1

    args = (np.int32(3), np.ones((256, 512), np.float32), np.ones((64, 256), np.float32))
    module = jit(f, mesh=mesh).trace(*args).lower(propagate=False).module
    lines = str(module).splitlines()
    meshes = [line for line in lines if line.lstrip().startswith("sdy.mesh")]
    assert len(meshes) == 2
    rest = [line for line in lines if line not in meshes]
    with module.context:
        empty_first = ir.Module.parse("\n".join(rest[:1] + sorted(meshes) + rest[1:]))
    assert str(empty_first).index("@empty_mesh =") < str(empty_first).index("@mesh =")
    evaluator = Evaluator(empty_first, hardware("cpu"))
    assert evaluator.mesh == "mesh"
    x_on_data = tensor_sharding("mesh", (("data",), ()), dict(mesh.shape))
    step, _ = evaluator({2: x_on_data})
    assert step.collectives >= 1 and step.comm_bytes > 0  # the sum's all-reduce

    lowered = jit(f, in_shardings=AUTO, out_shardings=AUTO, mesh=mesh).lower(*args)
    report = lowered.auto_report()
    given = jit(f, in_shardings=lowered.in_shardings[0], mesh=mesh).trace(*args).lower(
        propagate=False)
    fresh = modelled_step(given.module)
    assert (report.step.collectives, report.step.comm_bytes) == (fresh.collectives,
                                                                 fresh.comm_bytes)
    assert report.step.seconds == pytest.approx(fresh.seconds)
    total, step = lowered.compile()(*args)
    np.testing.assert_allclose(float(total), float(np.sum(np.tanh(args[2] @ args[1]))),
                               rtol=1e-5)
    assert int(step) == 4


def test_llama_like_step_reaches_the_expert_configuration():
    # Attention + SwiGLU MLP train step: the choice models no slower than FSDP on
    # `data` x Megatron TP on `model`, nor than data parallel, and runs as jax.jit.
    case = auto_bench.llama_case(layers=2, d=64, hidden=176, batch=8, seq=16)
    lowered = jit(case.fun, in_shardings=AUTO, out_shardings=AUTO, mesh=case.mesh).lower(
        *case.args)
    chosen = lowered.auto_report().step.seconds
    for name, config in case.configs.items():
        given = jit(case.fun, in_shardings=auto_bench._named(config, case.mesh),
                    mesh=case.mesh).trace(*case.args).lower(propagate=False)
        assert chosen <= modelled_step(given.module).seconds, name
    _close(lowered.compile()(*case.args), jax.jit(case.fun)(*case.args))


def test_auto_around_a_shard_map(mesh):
    # A manual computation: each state propagates a copy of the module (the shared
    # read cannot stand for it); the search and its results are the same kind.
    def f(w, x):
        h = jax.shard_map(lambda a: a * 2, mesh=mesh, in_specs=P("data"), out_specs=P("data"))(x)
        return jnp.tanh(h @ w)

    w = np.ones((64, 128), np.float32) / 64
    x = np.arange(16 * 64, dtype=np.float32).reshape(16, 64) / 1e3
    lowered = jit(f, in_shardings=AUTO, out_shardings=AUTO, mesh=mesh).lower(w, x)
    _shardings_on(lowered.in_shardings, mesh)
    (result,) = _shardings_on(lowered.out_shardings, mesh)
    got = lowered.compile()(w, x)
    want = jax.jit(f, in_shardings=lowered.in_shardings[0], out_shardings=result)(w, x)
    _close(got, want)
    assert got.sharding.is_equivalent_to(want.sharding, 2)


def test_pjit_auto_under_a_legacy_mesh(mesh):
    # pjit.AUTO's old home: pjit under `with mesh:` (the mesh it chooses on).
    x = np.arange(64.0, dtype=np.float32).reshape(16, 4)
    f = pjit(lambda x: jnp.sin(x) @ jnp.ones((4, 8)), in_shardings=AUTO, out_shardings=AUTO)
    with mesh:
        lowered = f.lower(x)
        _shardings_on(lowered.in_shardings, mesh)
        np.testing.assert_allclose(np.asarray(f(x)), np.sin(x) @ np.ones((4, 8)), rtol=1e-5)
    with pytest.raises(ValueError, match="AUTO shardings need a mesh"):
        f.lower(x)


def test_auto_on_an_abstract_mesh_plans_for_the_lowering_platform():
    # Every sharding AUTO on an AbstractMesh: jax's module names no mesh, and the
    # search must still price candidates on the mesh given, for the platform the
    # trace is lowered for.
    abstract = jax.sharding.AbstractMesh((2, 4), ("data", "model"),
                                         axis_types=(AxisType.Auto,) * 2)
    d, hidden, batch = 2048, 8192, 1024  # large enough that a TPU step gains by sharding
    f32 = jnp.float32
    args = ([(jax.ShapeDtypeStruct((d, hidden), f32), jax.ShapeDtypeStruct((hidden, d), f32))] * 2,
            jax.ShapeDtypeStruct((batch, d), f32), jax.ShapeDtypeStruct((batch, d), f32))
    lowered = jit(train_step, in_shardings=AUTO, out_shardings=AUTO, mesh=abstract).trace(
        *args).lower(lowering_platforms=("tpu",))
    assert lowered.target_platform == "tpu"
    report = lowered.auto_report()
    in_shardings = jax.tree.leaves(lowered.in_shardings[0])
    assert all(isinstance(s, NamedSharding) and s.mesh == abstract for s in in_shardings)
    assert any(s.spec != P() for s in in_shardings)
    # What the search reports is what Lowered.step_time models for its choice (both
    # tpu v5e), and no slower than everything replicated, priced the same way.
    replicated = jax.tree.map(lambda _: NamedSharding(abstract, P()), args)
    unchosen = jit(train_step, in_shardings=replicated).trace(*args).lower(
        lowering_platforms=("tpu",), propagate=False)
    assert report.step.seconds <= modelled_step(unchosen.module, "tpu").seconds
    assert report.step.comm_bytes > 0


def _uneven_step(params, x, y):
    def loss(params):
        h = jax.nn.relu(x @ params[0])
        h = jnp.tanh(h @ params[1])
        h = jax.nn.relu(h @ params[2])
        return jnp.mean((h @ params[3] - y) ** 2)
    value, grads = jax.value_and_grad(loss)(params)
    return [w - 1e-3 * g for w, g in zip(params, grads)], value


def test_auto_keeps_the_operations_the_textbook_configurations_need(mesh):
    # Uneven widths: the step-time model alone buys a little modelled communication
    # with much replicated compute; the choice's operations per device stay within
    # 2% of the fewest of data parallel and FSDP x tensor parallel.
    rng = np.random.default_rng(0)
    widths = (64, 256, 128, 512, 64)
    params = [rng.normal(size=(a, b)).astype(np.float32) / np.sqrt(a)
              for a, b in zip(widths, widths[1:])]
    x = rng.normal(size=(32, 64)).astype(np.float32)
    y = rng.normal(size=(32, 64)).astype(np.float32)
    lowered = jit(_uneven_step, in_shardings=AUTO, out_shardings=AUTO, mesh=mesh).lower(
        params, x, y)
    chosen = lowered.auto_report().step

    def modelled(param_specs, batch):
        shardings = ([NamedSharding(mesh, s) for s in param_specs], NamedSharding(mesh, batch),
                     NamedSharding(mesh, batch))
        return modelled_step(jit(_uneven_step, in_shardings=shardings, mesh=mesh).trace(
            params, x, y).lower(propagate=False).module)

    data_parallel = modelled([P()] * 4, P(("data", "model")))
    expert = modelled([P("data", "model"), P("model", "data"), P("data", "model"),
                       P("model", "data")], P("data"))
    assert chosen.flops <= 1.02 * min(data_parallel.flops, expert.flops)
    assert chosen.seconds <= expert.seconds
    _close(lowered.compile()(params, x, y), jax.jit(_uneven_step)(params, x, y))


def _concat_features_step(params, batch):
    """A step whose gradient splits a concatenation with an input: the split's slice of
    the input's part is dead, so the search propagates copies of the module."""
    def loss(params):
        x, features = batch
        hidden = jax.nn.relu(jnp.concatenate([x @ params["w1"], features], -1) @ params["w2"])
        return jnp.mean((hidden @ params["w3"]) ** 2)
    loss_value, grads = jax.value_and_grad(loss)(params)
    return jax.tree.map(lambda w, g: w - 0.1 * g, params, grads), loss_value


def test_memory_budget_on_a_module_propagated_as_copies(mesh):
    keys = jax.random.split(jax.random.key(2), 5)
    params = {"w1": 0.1 * jax.random.normal(keys[0], (64, 128)),
              "w2": 0.1 * jax.random.normal(keys[1], (160, 128)),
              "w3": 0.1 * jax.random.normal(keys[2], (128, 64))}
    batch = (jax.random.normal(keys[3], (32, 64)), jax.random.normal(keys[4], (32, 32)))
    evaluator = Evaluator(jit(_concat_features_step, mesh=mesh).trace(params, batch).lower(
        propagate=False).module, hardware("cpu"), mesh)
    assert not evaluator.read.usable  # the dead slice: every state is a propagated copy
    jitted = jit(_concat_features_step, in_shardings=AUTO, out_shardings=AUTO, mesh=mesh,
                 memory_budget=200_000)
    lowered = jitted.lower(params, batch)
    assert lowered.auto_report().step.memory_peak <= 200_000
    _close(lowered.compile()(params, batch), jax.jit(_concat_features_step)(params, batch))


def test_memory_counts_shards_where_an_empty_mesh_is_declared_first(mesh):
    """jax may declare an empty mesh before the program's (a held-out two-tower model's
    AUTO module did): the memory model counted every buffer whole there."""
    args = _mlp()
    module = jit(train_step, mesh=mesh).trace(*args).lower(propagate=False).module
    text = str(module)
    at = text.index("sdy.mesh @")
    with module.context:
        empty_first = ir.Module.parse(
            text[:at] + 'sdy.mesh @empty_mesh = <[]>\n  ' + text[at:])
    found = []
    for program in (module, empty_first):
        evaluator = Evaluator(program, hardware("cpu"), mesh)
        sharded = {p: tensor_sharding(evaluator.mesh, (("data", "model"), ()), dict(mesh.shape))
                   for p, value in enumerate(evaluator.arguments)
                   if len(evaluator.read.graph.value_shape[value] or ()) == 2
                   and evaluator.read.graph.value_shape[value][0] % 8 == 0}
        assert sharded
        found.append((evaluator.memory(evaluator(sharded)[1]), evaluator.memory(evaluator({})[1])))
    assert found[0] == found[1]
    assert found[0][0] < found[0][1]  # the sharded arguments are counted as shards
