"""Property tests of the whole pipeline on random sharded programs (hypothesis).

Programs come from ``fuzz/program_grammar.py``: elementwise, dot_general,
reshape, transpose, broadcast, reduce, concatenate, slice and sharding
constraints over random 8-device meshes of 1-3 axes, with random argument
and result ``PartitionSpec``s (``None``, axes, tuples of axes,
``P.UNCONSTRAINED`` in constraints, and dimensions they do not divide).

Properties:

(b) ``test_sharded_outputs_equal_unsharded_reference``: compiled through
    ``shardc.compiler.jit`` the program gives the same numbers as the same
    function (without constraints) run by jax on one device, and each result
    has the sharding asked for; argument/result specs that do not divide
    their dimension are rejected with ``IndivisibleDimensionError``.
(a) ``test_propagated_shardings_verify_and_name_real_axes``: after our
    propagation (``shardc.compiler.propagation.propagate``, every strategy)
    the lowered module re-parses and verifies in a fresh context and every
    ``#sdy.sharding`` names an existing mesh and axes.
(d) ``test_cost_aware_outputs_equal_unsharded_reference``: (b) with
    ``propagation="cost-aware"``, its region rounds forced on half of the
    programs; the search never predicts more bytes or a higher memory peak.
(3) ``test_propagation_agreement_with_shardy_oracle``: the same lowered
    modules through jaxlib's native ``sdy-*-propagate`` passes (the oracle,
    tests only); prints the rate of byte-identical results.

Runs are deterministic (``derandomize=True``): 100/160/40 examples by default,
``SHARDC_PROPERTY_EXAMPLES=N`` scales them (N for (b), 1.6 N for the cheap
lowering-only properties, 0.4 N for (d)).

Saved regressions (c): when a property fails, the checks of the shrunk
example are wrapped in ``lit_regressions.saved_on_failure``, which writes
its lowered module as ``test/lit/regressions/<property>_<hash>.mlir`` with a
``// RUN: shardc-opt %s <pass flags> | filecheck %s`` line, CHECK lines and
the program's ``repr`` in a comment, and names the file in the failure
message. Commit the file with the fix (``SHARDC_SAVE_REGRESSIONS=0`` turns
saving off).
"""

from __future__ import annotations

import contextlib
import dataclasses
import difflib
import functools
import os
import subprocess
import tempfile
from collections import Counter

# On failure hypothesis's pytest plugin writes a patch file under its storage
# directory (``./.hypothesis`` by default); keep it out of the repository.
os.environ.setdefault("HYPOTHESIS_STORAGE_DIRECTORY",
                      os.path.join(tempfile.gettempdir(), "shardc-hypothesis"))

import jax
import numpy as np
import pytest
from fuzz import deterministic, lit_regressions, program_grammar, sharding_checks
from hypothesis import event, given, settings
from hypothesis import strategies as st
from jax.sharding import NamedSharding
from jaxlib.mlir import ir, passmanager

from shardc.compiler import jit
from shardc.dialects import make_context
from shardc.dialects.errors import IndivisibleDimensionError

propagation = pytest.importorskip("shardc.compiler.propagation")

EXAMPLES = int(os.environ.get("SHARDC_PROPERTY_EXAMPLES", "100"))
LOWERING_EXAMPLES = max(1, EXAMPLES * 8 // 5)
_COMMON = deterministic.settings_kwargs()
COMPILE_SETTINGS = settings(max_examples=EXAMPLES, **_COMMON)
CHEAP_COMPILE_SETTINGS = settings(max_examples=max(1, EXAMPLES * 2 // 5), **_COMMON)
LOWERING_SETTINGS = settings(max_examples=LOWERING_EXAMPLES, **_COMMON)
RTOL = ATOL = 1e-5

# Our strategies, the shardc-opt flags that run them and the native passes
# they reproduce.
STRATEGY_FLAGS = {
    "basic": "-shardc-basic-propagate",
    "aggressive": "-shardc-aggressive-propagate",
    "basic-then-aggressive":
        "-shardc-aggressive-propagate=propagation-strategy=basic-then-aggressive",
    "op-priority": "-shardc-op-priority-propagate",
    "user-priority": "-shardc-user-priority-propagate",
}
NATIVE_PASSES = {
    "basic": "sdy-basic-propagate",
    "aggressive": "sdy-aggressive-propagate{propagation-strategy=aggressive}",
    "basic-then-aggressive":
        "sdy-aggressive-propagate{propagation-strategy=basic-then-aggressive}",
    "op-priority": "sdy-op-priority-propagate",
    "user-priority": "sdy-user-priority-propagate",
}
strategies = st.sampled_from(sorted(set(STRATEGY_FLAGS) & set(propagation.PLANS)))


def shardc_jit(program: program_grammar.Program, mesh):
    return jit(program.function(mesh), in_shardings=program.arg_specs,
               out_shardings=program.out_specs, mesh=mesh)


def divisible_only(program: program_grammar.Program) -> program_grammar.Program:
    """The program with every indivisible argument/result spec replaced by None."""
    sizes = dict(zip(program.axis_names, program.mesh_shape))

    def keep(shape, spec):
        ok = spec is None or program_grammar.divides(shape, spec, sizes)
        return spec if ok else None

    return dataclasses.replace(
        program,
        arg_specs=tuple(map(keep, program.arg_shapes, program.arg_specs)),
        out_specs=tuple(map(keep, program.out_shapes(), program.out_specs)),
    )


def unsharded_reference(program: program_grammar.Program, args) -> list[np.ndarray]:
    """The program without constraints, run by jax on one device."""
    device = jax.devices()[0]
    placed = [jax.device_put(a, device) for a in args]
    results = jax.block_until_ready(jax.jit(program.function(None))(*placed))
    return [np.asarray(r) for r in results]


def lowered_text(program: program_grammar.Program) -> str:
    args = program.arguments()
    return shardc_jit(program, program.make_mesh()).lower(*args).as_text(propagated=True)


@COMPILE_SETTINGS
@given(program=program_grammar.programs())
def test_sharded_outputs_equal_unsharded_reference(program):
    mesh = program.make_mesh()
    args = program.arguments()
    jitted = shardc_jit(program, mesh)
    event(f"{len(program.steps)} steps, mesh {program.mesh_shape}")
    if program.spec_problems():
        event("indivisible spec rejected")
        with pytest.raises(IndivisibleDimensionError, match=r"not divisible by \d+"):
            jitted.lower(*args)
        return
    lowered = jitted.lower(*args)
    with lit_regressions.saved_on_failure("outputs", lowered.as_text, lambda: repr(program)):
        results = jax.block_until_ready(lowered.compile()(*args))
        expected = unsharded_reference(program, args)
        assert len(results) == len(expected)
        for index, (got, want, spec) in enumerate(zip(results, expected, program.out_specs)):
            np.testing.assert_allclose(np.asarray(got), want, rtol=RTOL, atol=ATOL,
                                       err_msg=f"result {index}")
            if spec is not None and not any(e is spec.UNCONSTRAINED for e in spec):
                assert got.sharding.is_equivalent_to(NamedSharding(mesh, spec), got.ndim), (
                    f"result {index} has {got.sharding}, asked for {spec}")


@LOWERING_SETTINGS
@given(program=program_grammar.programs(), strategy=strategies)
def test_propagated_shardings_verify_and_name_real_axes(program, strategy):
    program = divisible_only(program)
    text = lowered_text(program)
    with lit_regressions.saved_on_failure(
        f"propagate_{strategy.replace('-', '_')}", lambda: text,
        lambda: f"{program!r}\nstrategy={strategy!r}", pass_flags=[STRATEGY_FLAGS[strategy]],
    ):
        printed = our_propagation(text, strategy)
        problem = sharding_checks.verification_problem(printed)
        if problem is None:
            reparsed = ir.Module.parse(printed, make_context())
            problem = "\n".join(sharding_checks.sharding_reference_problems(reparsed))
        if problem:
            pytest.fail(f"after {strategy} propagation: {problem[:1500]}", pytrace=False)


@contextlib.contextmanager
def cost_aware_search_options(**options):
    """Run ``jit(..., propagation="cost-aware")`` with these ``search.resolve`` options."""
    from shardc.compiler import cost_aware

    original = cost_aware.resolve
    cost_aware.resolve = functools.partial(original, **options)
    try:
        yield
    finally:
        cost_aware.resolve = original


@CHEAP_COMPILE_SETTINGS
@given(program=program_grammar.programs(), regions=st.booleans())
def test_cost_aware_outputs_equal_unsharded_reference(program, regions):
    """(d) ``propagation="cost-aware"``, module rounds or region rounds (forced on these
    small programs): same numbers and result shardings as (b), never more predicted
    bytes or a higher memory peak than Shardy's choices."""
    program = divisible_only(program)
    mesh = program.make_mesh()
    args = program.arguments()
    event("region rounds" if regions else "module rounds")
    with cost_aware_search_options(local_above=0 if regions else 10**9):
        lowered = jit(program.function(mesh), in_shardings=program.arg_specs,
                      out_shardings=program.out_specs, mesh=mesh,
                      propagation="cost-aware").lower(*args)
    log = ""
    resolution = lowered.cost_aware_resolution
    if resolution is None:
        event("nothing to propagate")  # no sharding anywhere: the pipeline is skipped
    else:
        log = resolution.format_text()
        assert resolution.final_bytes <= resolution.baseline_bytes, log
        assert resolution.final_memory <= resolution.baseline_memory, log
        if resolution.pins:
            event("cost-aware changed a sharding")
    results = jax.block_until_ready(lowered.compile()(*args))
    expected = unsharded_reference(program, args)
    for index, (got, want, spec) in enumerate(zip(results, expected, program.out_specs)):
        np.testing.assert_allclose(np.asarray(got), want, rtol=RTOL, atol=ATOL,
                                   err_msg=f"result {index}\n{log}")
        if spec is not None and not any(e is spec.UNCONSTRAINED for e in spec):
            assert got.sharding.is_equivalent_to(NamedSharding(mesh, spec), got.ndim)


def native_propagation(text: str, strategy: str) -> str | None:
    """The oracle's output, or None when Shardy's native pass rejects the module."""
    context = make_context()
    module = ir.Module.parse(text, context)
    try:
        passmanager.PassManager.parse(
            f"builtin.module({NATIVE_PASSES[strategy]})", context).run(module.operation)
    except ir.MLIRError:
        return None
    return str(module)


def our_propagation(text: str, strategy: str) -> str:
    module = ir.Module.parse(text, make_context())
    propagation.propagate(module, plan=strategy)
    return str(module)


def test_propagation_agreement_with_shardy_oracle():
    """Compare our propagation with Shardy's on random programs; report the agreement rate."""
    tally: Counter[str] = Counter()
    first_difference: list[str] = []

    @LOWERING_SETTINGS
    @given(program=program_grammar.programs(), strategy=strategies)
    def compare(program, strategy):
        text = lowered_text(divisible_only(program))
        theirs = native_propagation(text, strategy)
        if theirs is None:
            tally["oracle rejects"] += 1
            return
        ours = our_propagation(text, strategy)
        if ours == theirs:
            tally["agree"] += 1
            return
        tally["differ"] += 1
        if not first_difference:
            diff = difflib.unified_diff(theirs.splitlines(), ours.splitlines(),
                                        "shardy", "shardc", lineterm="")
            first_difference.append(f"{program!r} strategy={strategy}\n" + "\n".join(diff))

    compare()
    compared = tally["agree"] + tally["differ"]
    rate = tally["agree"] / compared if compared else 1.0
    print(f"\npropagation vs Shardy oracle: {tally['agree']}/{compared} byte-identical "
          f"({rate:.0%}), {tally['oracle rejects']} rejected by the oracle")
    if first_difference:
        print("first difference:\n" + first_difference[0])
    assert compared, "the oracle rejected every program"


def test_saved_regression_is_a_passing_lit_test(tmp_path, monkeypatch):
    """The regression writer's file runs like lit would run it, and comments stay inert."""
    monkeypatch.setenv("SHARDC_SAVE_REGRESSIONS", "1")
    program = program_grammar.Program(
        mesh_shape=(2, 4), arg_shapes=((8, 4),), arg_specs=(program_grammar.P("x"),),
        steps=(program_grammar.Step("unary", (0,), ("tanh",)),), outputs=(1,),
        out_specs=(None,), data_seed=0)
    text = lowered_text(program)
    with pytest.raises(AssertionError, match="CHECK: nothing"):
        with lit_regressions.saved_on_failure(
            "selftest", lambda: text, lambda: f"{program!r}\nRUN: false",
            pass_flags=[STRATEGY_FLAGS["basic"]], directory=tmp_path,
        ):
            raise AssertionError("CHECK: nothing // RUN: false")
    (saved,) = tmp_path.glob("selftest_*.mlir")
    content = saved.read_text()
    run_lines = [line for line in content.splitlines() if "RUN:" in line]
    assert run_lines == ["// RUN: shardc-opt %s -shardc-basic-propagate | filecheck %s"]
    opt = subprocess.run(["shardc-opt", str(saved), "-shardc-basic-propagate"],
                         capture_output=True, text=True, timeout=120, check=True)
    subprocess.run(["filecheck", str(saved)], input=opt.stdout, text=True, timeout=60,
                   check=True)
